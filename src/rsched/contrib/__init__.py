"""rsched in web frameworks (public): ``rsched.contrib.fastapi``.

Like ``rsched.web``, these modules use only the public ``rsched`` API (and the dashboard), as an
application would; each needs its framework installed (``pip install rsched[web]`` for FastAPI).
"""
