"""End-to-end: Flask and FastAPI views behind sluice_ratelimit, against the
sluice on 127.0.0.1:<port>, through each framework's test client (the real
framework and WSGI/ASGI stack, without a socket). Prints one JSON line per
request. Usage: e2e.py <port> <limit> <frameworks: flask,fastapi>"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import redis  # noqa: E402
from sluice_ratelimit import RateLimiter  # noqa: E402

port, limit, frameworks = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
client = redis.Redis(host="127.0.0.1", port=port)


def show(framework, res):
    h = res.headers
    print(json.dumps({"framework": framework, "status": res.status_code,
                      "ratelimit": h.get("RateLimit"), "policy": h.get("RateLimit-Policy"),
                      "retryAfter": h.get("Retry-After")}))


if "flask" in frameworks:
    import flask

    app = flask.Flask(__name__)
    limiter = RateLimiter(client, limit=limit, window=60, name="api", prefix="flask:")

    @app.get("/")
    @limiter.flask()
    def index():
        return "hello"

    tc = app.test_client()
    for _ in range(limit + 1):
        show("flask", tc.get("/"))

if "fastapi" in frameworks:
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    api = FastAPI()
    limiter = RateLimiter(client, limit=limit, window=60, name="api", prefix="fastapi:")

    @api.get("/", dependencies=[Depends(limiter.fastapi())])
    def root():
        return "hello"

    tc = TestClient(api)
    for _ in range(limit + 1):
        show("fastapi", tc.get("/"))
