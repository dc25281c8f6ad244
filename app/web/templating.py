"""The one Jinja environment every page renders with."""

from fastapi.templating import Jinja2Templates

from app import __version__, numbers
from app.paths import TEMPLATES_DIR
from app.measured.doubts import doubts
from app.web import custom_gpu, picker

templates = Jinja2Templates(directory=TEMPLATES_DIR)
templates.env.globals["version"] = __version__
templates.env.filters.update(numbers.FILTERS)
templates.env.globals["setting"] = numbers.setting
templates.env.globals["model_groups"] = picker.groups
templates.env.globals["custom_gpu_boxes"] = lambda: custom_gpu.BOXES
templates.env.globals["doubts"] = doubts
