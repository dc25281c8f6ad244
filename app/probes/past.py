"""What a probe module may ask of this server's stored results, as a protocol: app/measured/
answers it, and the layer that holds a job store (the API's services, the pages) passes one in.
So a probe's prepare hook and its charts read past measurements without reading the job store
themselves, and arrows keep pointing down."""

from typing import Any, Protocol


class Past(Protocol):
    def calibration(self, environment: Any) -> Any:
        """app/measured/calibration.Calibration of the device a result's environment names (same
        kind and name), by its stated rule."""

    def train_step_rate(self, params: Any, device: Any, job_id: int | None) -> tuple[float, int] | None:
        """(tokens/s, job id) of the run `job_id` names, or else of the best recent full
        train_step run on `device` (app/device.DeviceInfo) with the model, precision, optimizer,
        batch_size and seq_len of `params` (a TrainStepParams); None when none has run.
        InvalidInput naming params.train_job_id when the named run is not such a run."""
