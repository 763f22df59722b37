# CleanRL image for AWS Batch (see docs/cloud.md): CUDA runtime, the scripts and their extras, a virtual
# display for --capture-video, and an entrypoint that runs any command given to the job. No secrets here:
# W&B credentials reach a job through its environment at submission time (cloud/submit.py).
FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics

# System packages, rarely changed: Python, tini (PID 1 that forwards SIGTERM), Xvfb and Mesa for rendering,
# the Qt 5 runtime that envpool's Procgen needs, and a C compiler with Python's headers for --compile (Triton
# builds a small launcher for its GPU kernels, inductor's CPU kernels are C++). Debian-style version pins
# would break on every base update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-pip python3-dev build-essential \
        tini xvfb libgl1 libgl1-mesa-dri libegl1 libglfw3 libosmesa6 libglib2.0-0 libqt5gui5 \
        ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv "$VIRTUAL_ENV"

WORKDIR /workspace

# Dependencies before sources: editing a script does not reinstall PyTorch. The project itself is
# installed (its versions are pyproject.toml's), not loose packages, hence DL3013 is ignored.
COPY pyproject.toml README.md ./
# hadolint ignore=DL3013
RUN pip install --upgrade pip==24.3.1 \
    && pip install ".[atari,mujoco,procgen]"

COPY cloud/entrypoint.sh /usr/local/bin/cleanrl-entrypoint
COPY . .

ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/cleanrl-entrypoint"]
CMD ["python", "cleanrl/ppo.py", "--help"]
