"""The one Jinja environment every page renders with."""

from fastapi.templating import Jinja2Templates

from app import __version__, numbers
from app.paths import TEMPLATES_DIR
from app.web import picker

templates = Jinja2Templates(directory=TEMPLATES_DIR)
templates.env.globals["version"] = __version__
templates.env.filters.update(numbers.FILTERS)
templates.env.globals["setting"] = numbers.setting
templates.env.globals["model_groups"] = picker.groups
