"""The web dashboard under ``/dashboard``: server-rendered pages (Jinja2, templates in
``web/templates/dashboard``), a little JavaScript of our own for the live refresh and
the confirmations, and charts drawn as SVG on the server; nothing fetched from outside.

Every number comes from the library functions the API uses. ``JOBQ_DASHBOARD`` decides
what exists: ``full`` (pages and actions), ``readonly`` (pages only: the action routes
are not registered) or ``off`` (nothing, and ``/`` answers 404). The dashboard's routes
are not behind the API's bearer token: :mod:`web.dashboard.security` guards them with a
login and a cookie instead.
"""

from web.dashboard.site import BLUEPRINTS, OPEN_ENDPOINTS, install

__all__ = ["BLUEPRINTS", "OPEN_ENDPOINTS", "install"]
