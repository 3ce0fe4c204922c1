"""The simulator's HTTP handlers, one module per endpoint family.

``routes`` maps each path to its handler; every handler is ``async (server, request,
connection) -> Response | None`` (None: it streamed its answer on the connection itself) and
reads the server's state (``server.SimServer``) without owning any of the start-up.
"""
