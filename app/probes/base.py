"""One probe, as one record: what it accepts and reports, where its child starts, what it
needs of a device, and how its results are shown (its faces, app/probes/faces.py).

Every part of Tally that deals with probes reads this record and nothing else: the child (the
entry point), the jobs API (its request and result unions), admission (the memory need, the
least duration, the scratch file), submission (the prepare hook), the job page, the compare
page, the launch form, the CSV export and `tally probe`'s table. Adding a probe is one module
that defines a `PROBE` (and a line in registry.py's list, or a site's TALLY_PROBE_MODULES);
its torch side sits in app/bench/.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from app.probes.faces import Faces
from app.probes.ledger import Ledger
from app.probes.params import ProbeParams, SustainParams
from app.probes.past import Past

Kind = Literal["cuda", "cpu"]
Need = tuple[int, str]
"""Bytes on the device at the job's peak, and the parameter (a dotted path under the job
body) that sets them, for the refusal's message."""
Least = tuple[float, str]
"""Seconds the job cannot finish sooner than, and the parameter that sets them."""


@dataclass(frozen=True)
class Probe:
    name: str
    summary: str
    params: type[ProbeParams]
    result: type
    """A dataclass with a `probe` field equal to `name`."""
    entry: str
    """"module:function" run in the child (app/bench/child.py): (raw params, progress) -> result dict."""
    need: Callable[[Any, Kind], Need]
    """(params, kind) -> the device memory the job needs, not counting the timer's flush buffer."""
    least_seconds: Callable[[Any, Kind], Least]
    """(params, kind) -> a lower bound on the job's duration (see timer_least)."""
    scratch: Callable[[Any, Kind], Need] | None = None
    """(params, kind) -> bytes the job writes to the server's scratch disk (app/probes/scratch.py),
    and the parameter that sets them; None for a probe that writes no file."""
    prepare: Callable[[Any, Any, Past], Any] | None = None
    """(params, device, past) -> params, at submission: what the job takes from this server's own
    runs on `device` (app/device.DeviceInfo) before it is sized and queued; InvalidInput naming a
    parameter it cannot honour. None: the parameters go as given."""
    faces: Faces = field(default_factory=Faces)
    spans_boxes: bool = False
    """Its ranks may span boxes (a job's `nodes`, app/jobs/gangs.py): its entry reads where they meet
    from protocol.nodes_from_env and starts its ranks with app/bench/nodes.py."""
    ledger: Ledger | None = None
    """Its (prediction, measurement) pairs for the accuracy ledger (app/probes/ledger.py); None for a
    probe that predicts nothing a ledger could score."""


def timer_least(params: ProbeParams, measurements: int) -> Least:
    """The least time `measurements` runs of the timer (app/bench/timer.py) take: each warms up
    for warmup_s seconds at least (Timer.warm_up runs until that much has passed).

    The timed part is not counted: it lasts about measure_s, but a fast kernel reaches max_iters
    sooner, so no positive floor holds for it whatever the parameters. Child start-up, imports
    and allocation are not counted either. So a job refused by this estimate could never have
    finished, and one admitted may still time out.
    """
    return params.warmup_s * measurements, "params.warmup_s"


def sustained_least(least: Least, params: SustainParams) -> Least:
    """A sustained run (sustain_s) lasts that long at least, after the timing."""
    seconds, name = least
    return (seconds + params.sustain_s, name if seconds >= params.sustain_s else "params.sustain_s")
