"""The REST/JSON bridge: routes, JSON profile and OpenAPI all come from proto descriptors.

Nothing here knows a single endpoint by name; adding a service to the bridge means adding
its service descriptor to ``backends.DEFAULT_SERVICES`` and its address to
``backends.backend_addresses``.
"""
