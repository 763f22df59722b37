# CleanRL image for AWS Batch (see docs/cloud.md): Python, the scripts and their extras, a virtual display for
# --capture-video, and an entrypoint that runs any command given to the job. No secrets here: W&B credentials
# reach a job through its environment at submission time or from Secrets Manager (cloud/submit.py, cloud/*.tf).
# A plain Python base, not a CUDA one: the PyTorch wheel brings its own CUDA libraries (the nvidia-* wheels), and
# the host's driver comes in through the NVIDIA container toolkit of the GPU AMI.
FROM python:3.11-slim-bookworm

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics

# System packages, rarely changed: tini (PID 1 that forwards SIGTERM), Xvfb and Mesa for rendering, the Qt 5
# runtime that envpool's Procgen needs, and a C/C++ compiler for --compile (Triton builds a small launcher for
# its GPU kernels, inductor's CPU kernels are C++; the Python headers come with the base image). Debian-style
# version pins would break on every base update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        g++ tini xvfb libgl1 libgl1-mesa-dri libegl1 libglfw3 libosmesa6 libglib2.0-0 libqt5gui5 \
        ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python -m venv "$VIRTUAL_ENV" \
    && useradd --create-home --uid 1000 cleanrl

WORKDIR /workspace

# Dependencies before sources: editing a script does not reinstall PyTorch. The project itself is
# installed (its versions are pyproject.toml's), not loose packages, hence DL3013 is ignored. The cloud
# extra (boto3) is what cloud/durable.py keeps runs/ in S3 with.
COPY pyproject.toml README.md ./
# hadolint ignore=DL3013
RUN pip install --upgrade pip==24.3.1 \
    && pip install ".[atari,mujoco,procgen,cloud]"

COPY cloud/entrypoint.sh /usr/local/bin/cleanrl-entrypoint
COPY . .
# The jobs run as an unprivileged user that owns only the working directory (runs/ and videos/ are written there).
RUN chown cleanrl:cleanrl /workspace
USER 1000

ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/cleanrl-entrypoint"]
CMD ["python", "cleanrl/ppo.py", "--help"]
