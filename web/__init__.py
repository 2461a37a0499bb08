"""The jobq HTTP API: a thin Flask app over the jobq library, served by Gunicorn.

``gunicorn 'web.app:create_app()'``; see :func:`web.app.create_app`.
"""
