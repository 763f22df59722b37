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
if [ "$#" -eq 0 ]; then
  set -- python cleanrl/ppo.py --help
fi
exec "$@"
