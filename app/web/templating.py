"""The one Jinja environment every page renders with."""

from fastapi.templating import Jinja2Templates

from app import __version__
from app.paths import TEMPLATES_DIR

templates = Jinja2Templates(directory=TEMPLATES_DIR)
templates.env.globals["version"] = __version__
