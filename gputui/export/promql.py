"""A small client for Prometheus's HTTP API (standard library only): instant and range queries.

Every failure becomes a PrometheusError with one line a person can act on.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class PrometheusError(Exception):
    """Prometheus could not be reached, was too slow, or refused the query."""


class QueryRefused(PrometheusError):
    """Prometheus answered, and said the query is wrong (a bad selector): retrying will not help."""


def check_url(url: str) -> str:
    """The API base URL without a trailing slash; ValueError with the reason when it is not usable."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r} (e.g. http://prometheus:9090)")
    try:
        parts.port  # noqa: B018 - raises for a port that is no number or out of range
    except ValueError:
        raise ValueError(f"not a usable port in {url!r} (e.g. http://prometheus:9090)") from None
    return url.rstrip("/")


def label_value(text: str) -> str:
    """`text` as a PromQL string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def matchers(selector: str) -> str:
    """A user's selector as matchers to put inside braces: `{job="gpu"}` and `job="gpu"` both work."""
    text = selector.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    return text


class Prometheus:
    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = check_url(url)
        self.timeout = timeout
        self.requests = 0

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._get("query", params)

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return self._get("query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}"})

    def _get(self, endpoint: str, params: dict[str, str]) -> list[dict[str, Any]]:
        # POST: a long selector does not hit URL length limits of proxies in front of Prometheus.
        data = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/{endpoint}", data=data, method="POST",
                                         headers={"Accept": "application/json"})
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                body = reply.read()
        except urllib.error.HTTPError as err:
            raise self._http_error(err) from None
        except TimeoutError:
            raise PrometheusError(f"Prometheus at {self.url} did not answer within {self.timeout:g} s"
                                  ) from None
        except urllib.error.URLError as err:
            reason = err.reason
            if isinstance(reason, TimeoutError):
                raise PrometheusError(f"Prometheus at {self.url} did not answer within {self.timeout:g} s"
                                      ) from None
            text = getattr(reason, "strerror", None) or str(reason)
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {text}") from None
        except http.client.HTTPException as err:  # a malformed answer, or a URL http.client rejects
            raise PrometheusError(f"cannot talk to Prometheus at {self.url}: {type(err).__name__}: {err}"
                                  ) from None
        except OSError as err:  # a connection reset mid-answer
            raise PrometheusError(f"cannot read from Prometheus at {self.url}: {err.strerror or err}"
                                  ) from None
        try:
            doc = json.loads(body)
            if doc.get("status") != "success":
                raise QueryRefused(f"Prometheus refused the query: {doc.get('error', 'no reason given')}")
            return list(doc["data"]["result"])
        except (ValueError, KeyError, TypeError, AttributeError):
            raise PrometheusError(f"{self.url} did not answer as Prometheus's HTTP API does") from None

    def _http_error(self, err: urllib.error.HTTPError) -> PrometheusError:
        try:
            reason = json.loads(err.read())["error"]
        except (ValueError, KeyError, TypeError, OSError):
            return PrometheusError(f"{self.url} answered HTTP {err.code} {err.reason} (is it Prometheus?)")
        if err.code in (400, 422):  # bad_data, execution: the query itself is wrong
            return QueryRefused(f"Prometheus refused the query: {reason}")
        # 503 timeout / canceled and the like: a loaded Prometheus; asking again may work.
        return PrometheusError(f"Prometheus could not answer (HTTP {err.code}): {reason}")
