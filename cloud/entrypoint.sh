#!/bin/sh
# Entrypoint of the CleanRL image: runs whatever command the job gives, e.g.
#   python cleanrl/ppo_atari.py --env-id BreakoutNoFrameskip-v4 --capture-video
#   torchrun --nproc-per-node gpu cleanrl/ppo_atari_multigpu.py
# tini (PID 1, see the Dockerfile) forwards SIGTERM from `docker stop` / a Spot reclaim to the command.
set -eu
# --capture-video renders frames; MuJoCo's default GLFW backend needs an X display: give it a virtual one.
if [ -z "${DISPLAY:-}" ] && [ "${CLEANRL_XVFB:-1}" = "1" ] && command -v Xvfb >/dev/null 2>&1; then
  Xvfb :99 -screen 0 1024x768x24 -nolisten tcp >/dev/null 2>&1 &
  export DISPLAY=:99
fi
# EC2 gives a Spot instance a two-minute interruption notice before it reclaims it, and ECS stops no running job then
# (it only places no new one on the instance). So in an AWS Batch job a watcher reads the notice from the instance
# metadata (IMDSv2, every CLEANRL_SPOT_POLL_SECONDS, 5 by default as EC2 recommends) and sends SIGTERM to the command
# when it appears: the run checkpoints and cloud/durable.py uploads it while the instance still runs. Where there is
# no instance metadata (not on EC2, AWS_EC2_METADATA_DISABLED=true) the watcher ends at once; it also ends with the
# command. AWS_EC2_METADATA_SERVICE_ENDPOINT points it elsewhere, as it does the AWS SDKs.
if [ -n "${AWS_BATCH_JOB_ID:-}" ] && [ "${AWS_EC2_METADATA_DISABLED:-false}" != "true" ] \
  && [ "${CLEANRL_SPOT_WATCH:-1}" = "1" ] && command -v python >/dev/null 2>&1; then
  python - "$$" <<'EOF' &
import os, signal, sys, time, urllib.request

command = int(sys.argv[1])  # this shell's PID, which the command keeps after exec
endpoint = os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://169.254.169.254").rstrip("/")
every = float(os.environ.get("CLEANRL_SPOT_POLL_SECONDS", "5"))


def metadata(path, method="GET", headers=None):
    request = urllib.request.Request(endpoint + path, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=2) as response:
        return response.read().decode()


def token():
    return metadata("/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "300"})


try:
    token()
except OSError:
    sys.exit(0)  # no instance metadata here: nothing to watch
while os.getppid() == command:
    try:
        action = metadata("/latest/meta-data/spot/instance-action", headers={"X-aws-ec2-metadata-token": token()})
    except OSError:  # 404 until a notice comes (and always on an On-Demand instance)
        action = None
    if action:
        sys.stderr.write(f"cleanrl-entrypoint: Spot interruption notice {action}: sending SIGTERM to the job\n")
        os.kill(command, signal.SIGTERM)
        break
    time.sleep(every)
EOF
fi
if [ "$#" -eq 0 ]; then
  set -- python cleanrl/ppo.py --help
fi
exec "$@"
