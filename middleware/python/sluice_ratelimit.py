"""Rate limits for Flask and FastAPI views, kept in sluice.

Each request is charged one unit of a per-client limit with one RL.* command
(RL.FIXED by default) through redis-py. An allowed request runs the view; a
denied one gets 429 Too Many Requests with Retry-After. Both carry the IETF
RateLimit fields (draft-ietf-httpapi-ratelimit-headers), built from sluice's
five-integer reply:

    RateLimit-Policy: "name";q=<limit>;w=<window seconds>
    RateLimit: "name";r=<remaining>;t=<seconds until the quota is restored>

Flask::

    limiter = RateLimiter(redis.Redis(port=6379), limit=100, window=60)

    @app.get("/")
    @limiter.flask()
    def index():
        return "hello"

FastAPI::

    @app.get("/", dependencies=[Depends(limiter.fastapi())])
    def index():
        return "hello"
"""

import functools
import math

__all__ = ["Decision", "RateLimiter"]

_COMMANDS = ("RL.FIXED", "RL.SLIDING", "RL.LOG")


class Decision:
    """sluice's reply to one charge, and the response headers it implies."""

    def __init__(self, reply, name, window_s):
        if len(reply) != 5:
            raise ValueError("sluice replied %r, want five integers" % (reply,))
        allowed, limit, remaining, retry_ms, reset_ms = (int(v) for v in reply)
        self.allowed = allowed == 1
        self.limit = limit
        self.remaining = remaining
        self.retry_after_ms = retry_ms
        self.reset_after_ms = reset_ms
        w = max(1, math.ceil(window_s))
        # t: when the quota is restored; for a denial, when a request is
        # allowed again (never: the window).
        t = math.ceil(reset_ms / 1000)
        self.headers = {}
        if not self.allowed:
            t = max(1, math.ceil(retry_ms / 1000) if retry_ms >= 0 else w)
            self.headers["Retry-After"] = str(t)
        self.headers["RateLimit-Policy"] = '"%s";q=%d;w=%d' % (name, limit, w)
        self.headers["RateLimit"] = '"%s";r=%d;t=%d' % (name, remaining, t)


class RateLimiter:
    """A limit of `limit` requests per `window` seconds and client.

    client: a redis.Redis connected to sluice (RESP2 or RESP3).
    command: "RL.FIXED" (default), "RL.SLIDING" or "RL.LOG".
    name: the policy's name in the RateLimit fields.
    prefix: put before every key.
    fail_open: let requests through when sluice cannot be asked (by
    default the error propagates: a 500, or 503 with FastAPI).
    """

    def __init__(self, client, limit, window, command="RL.FIXED", name="default",
                 prefix="rl:", fail_open=False):
        if command.upper() not in _COMMANDS:
            raise ValueError("command must be one of %s" % ", ".join(_COMMANDS))
        self.client = client
        self.limit = int(limit)
        self.window = float(window)
        self.command = command.upper()
        self.name = name
        self.prefix = prefix
        self.fail_open = fail_open

    def hit(self, key):
        """Charges one unit to key's limit and returns the Decision."""
        ms = max(1, round(self.window * 1000))
        reply = self.client.execute_command(self.command, self.prefix + key, self.limit, "%dms" % ms)
        return Decision(reply, self.name, self.window)

    # Flask.

    def flask(self, key_func=None):
        """A decorator for Flask views; key_func(request) names the client
        (default: request.remote_addr)."""
        import flask

        def decorate(view):
            @functools.wraps(view)
            def wrapped(*args, **kwargs):
                key = key_func(flask.request) if key_func else (flask.request.remote_addr or "")
                try:
                    d = self.hit(key)
                except Exception:
                    if self.fail_open:
                        return view(*args, **kwargs)
                    raise
                if not d.allowed:
                    return flask.Response("Too Many Requests\n", status=429, headers=d.headers)
                resp = flask.make_response(view(*args, **kwargs))
                resp.headers.update(d.headers)
                return resp

            return wrapped

        return decorate

    # FastAPI.

    def fastapi(self, key_func=None):
        """A FastAPI dependency; key_func(request) names the client
        (default: the client's host). It raises HTTPException 429 when
        denied, and adds the RateLimit fields to allowed responses."""
        from fastapi import HTTPException, Request, Response

        def dependency(request: Request, response: Response):
            key = key_func(request) if key_func else (request.client.host if request.client else "")
            try:
                d = self.hit(key)
            except Exception:
                if self.fail_open:
                    return None
                raise HTTPException(status_code=503, detail="rate limiter unavailable")
            if not d.allowed:
                raise HTTPException(status_code=429, detail="Too Many Requests", headers=d.headers)
            for k, v in d.headers.items():
                response.headers[k] = v
            return d

        return dependency
