"""A browser without a browser, for the tests and the chaos soak: keeps
cookies, reads the evening form's hidden fields, posts it."""

import http.cookiejar
import re
import time
import urllib.error
import urllib.parse
import urllib.request

SUBMISSION_KEY = re.compile(r'name="submission_key" value="([^"]+)"')
CSRF_TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def submission_key(page: str) -> str:
    """The hidden submission key of the evening form in this page."""
    return SUBMISSION_KEY.search(page).group(1)


def csrf_token(page: str) -> str:
    """The hidden CSRF token of the form in this page."""
    return CSRF_TOKEN.search(page).group(1)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def http_error_302(self, req, fp, code, msg, headers):
        return fp


class Guest:
    """Keeps cookies, fills in the evening form. With follow_redirects=False
    a 302 is returned as it is (its Location in `location`), and every
    response is closed at once (gunicorn lingers on a connection its client
    keeps open)."""

    def __init__(self, url: str, *, follow_redirects: bool = True) -> None:
        self.url = url
        handlers = [urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())]
        if not follow_redirects:
            handlers.append(_NoRedirect)
        self.opener = urllib.request.build_opener(*handlers)
        self.location = ""

    def get(self, path: str, timeout: float = 60) -> tuple[int, str]:
        try:
            with self.opener.open(self.url + path, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def register(
        self, name: str, timeout: float = 60, headers: dict[str, str] | None = None, email: str = ""
    ) -> tuple[int, str, float]:
        """POST the form (and follow the redirect, unless told not to): status,
        page, seconds the POST took. A form that does not come (a 503) is that
        status, with no POST."""
        status, form = self.get("/evening/", timeout=timeout)
        if status != 200:
            return status, form, 0.0
        fields = {"csrfmiddlewaretoken": csrf_token(form), "submission_key": submission_key(form), "name": name}
        if email:
            fields["email"] = email
        started = time.monotonic()
        request = urllib.request.Request(
            self.url + "/evening/", data=urllib.parse.urlencode(fields).encode(), headers=headers or {}
        )
        try:
            with self.opener.open(request, timeout=timeout) as response:
                self.location = response.headers.get("Location", "")
                return response.status, response.read().decode(), time.monotonic() - started
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), time.monotonic() - started

    def cancel(self, registration_path: str, timeout: float = 60) -> int:
        """Cancel a registration as its guest does: GET the confirmation page
        (its CSRF token), POST "Yes, cancel my registration". The POST's status
        (302 to the registration page), or the confirmation page's if it did
        not come."""
        status, page = self.get(registration_path + "cancel/", timeout=timeout)
        if status != 200:
            return status
        request = urllib.request.Request(
            self.url + registration_path + "cancel/",
            data=urllib.parse.urlencode({"csrfmiddlewaretoken": csrf_token(page)}).encode(),
            headers={"Referer": self.url},
        )
        try:
            with self.opener.open(request, timeout=timeout) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
