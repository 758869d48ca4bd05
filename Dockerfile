# One image for every component: `reachstore serve <component>` picks which one runs.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY services ./services
COPY clients/python ./clients/python
RUN pip install --no-cache-dir .
USER nobody
ENTRYPOINT ["reachstore", "serve"]
