# Tally on a CUDA GPU box. Build and run:
#   docker build -t tally .
#   docker run --gpus all -p 8000:8000 -v tally-data:/data tally
# The image binds every interface (TALLY_HOST=0.0.0.0). With no TALLY_API_TOKEN it generates
# a token at start-up and logs it once with the dashboard's URL (`docker logs`): submitting and
# cancelling jobs need it. Pass -e TALLY_API_TOKEN=... to choose one, or
# -e TALLY_ALLOW_ANONYMOUS=true to take jobs from anyone who can reach the port.
# The image holds no CUDA toolkit: torch's wheel brings its CUDA runtime and the host's
# driver comes in through the NVIDIA Container Toolkit (--gpus). Nothing is fetched at
# run time.

FROM python:3.12-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
# torch==2.13.0 from PyPI is the CUDA 12 build on Linux x86_64; point TORCH_INDEX_URL at a
# download.pytorch.org/whl/cuXXX index for another CUDA version. Its own layer: gigabytes
# that change far less often than Tally.
ARG TORCH_INDEX_URL=https://pypi.org/simple
RUN /opt/venv/bin/pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0
WORKDIR /srv/tally
COPY pyproject.toml README.md ./
COPY app ./app
COPY templates ./templates
COPY static ./static
# Editable: app/paths.py finds templates/ and static/ beside app/, as in a checkout.
RUN /opt/venv/bin/pip install --editable '.[worker]'

FROM python:3.12-slim-bookworm
# A system user with no shell and no password; it owns only the database volume.
RUN groupadd --system --gid 10001 tally \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin tally \
    && mkdir /data && chown 10001:10001 /data
COPY --from=build /opt/venv /opt/venv
COPY --from=build /srv/tally /srv/tally
WORKDIR /srv/tally
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TALLY_HOST=0.0.0.0 \
    TALLY_PORT=8000 \
    TALLY_DATABASE_PATH=/data/tally.db \
    TALLY_LOG_FORMAT=json \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# The job queue and every result: keep it on a volume so a new image keeps the history.
VOLUME ["/data"]
# Numeric, so a runtime that checks for non-root need not resolve the name.
USER 10001:10001
EXPOSE 8000
# python's urllib against /healthz: no curl in the image.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 CMD ["tally", "healthcheck"]
# `docker run ... tally worker`, `... tally calc ...` and the other commands work too.
ENTRYPOINT ["tally"]
CMD ["serve"]
