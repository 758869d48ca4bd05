# One image for every component: `reachstore serve <component>` picks which one runs.
FROM python:3.11-slim
WORKDIR /app
# Third-party packages from the lock, each checked against its hash, in a layer of their own;
# then the SDK and the server themselves, without resolving anything further.
COPY requirements/server.txt ./requirements/server.txt
RUN pip install --no-cache-dir --require-hashes -r requirements/server.txt
COPY pyproject.toml README.md ./
COPY reachstore_server ./reachstore_server
COPY clients/python ./clients/python
RUN pip install --no-cache-dir --no-deps ./clients/python .
USER nobody
ENTRYPOINT ["reachstore", "serve"]
