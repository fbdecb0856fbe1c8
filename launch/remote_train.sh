#!/usr/bin/env bash
# Runs ON a TPU VM (on every worker of a slice); launch/tpu_vm.sh and launch/tpu_pod.sh call it.
#
#   bash electra_jax/launch/remote_train.sh start LOG_FILE MAIN_FLAGS...
#       starts `run` in a detached tmux session, so that training outlives the ssh connection;
#       refuses while that session is still running.
#   bash electra_jax/launch/remote_train.sh run LOG_FILE MAIN_FLAGS...
#       pretrains in the foreground (python -m electra_jax.main MAIN_FLAGS..., which include
#       --workdir), appending its output to LOG_FILE.
#
# Relative paths are taken from the home directory. Started again with the same --workdir, the
# run resumes from its latest checkpoint. The variables ELECTRA_TRAIN_ENV names (space-separated;
# LIBTPU_INIT_ARGS when it is unset) reach the training process: `start` hands them to the tmux
# session.
set -euo pipefail

# ---- Settings.
VENV_DIR="${HOME}/electra_venv"       # made by remote_setup.sh
SESSION="electra"                     # the tmux session (`tmux attach -t electra` to watch)

start() {
  if tmux has-session -t "${SESSION}" 2> /dev/null; then
    echo "error: the tmux session '${SESSION}' on $(hostname) is still running; watch it with" \
      "'tmux attach -t ${SESSION}', or stop it with 'tmux kill-session -t ${SESSION}'" >&2
    exit 1
  fi
  local script
  script="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
  # A tmux server already running would start the session in its own environment, not this one.
  local environment=(-e "ELECTRA_TRAIN_ENV=${ELECTRA_TRAIN_ENV-LIBTPU_INIT_ARGS}") name
  for name in ${ELECTRA_TRAIN_ENV-LIBTPU_INIT_ARGS}; do
    if [[ -n "${!name:-}" ]]; then
      environment+=(-e "${name}=${!name}")
    fi
  done
  tmux new-session -d -s "${SESSION}" -c "${HOME}" ${environment[@]+"${environment[@]}"} \
    bash "${script}" run "$@"
  echo "started on $(hostname) in tmux session '${SESSION}'; log: ~/$1"
}

run() {
  local log="$1"
  shift
  cd "${HOME}"
  mkdir -p "$(dirname "${log}")"
  # shellcheck source=/dev/null
  source "${VENV_DIR}/bin/activate"
  local given="" name
  for name in ${ELECTRA_TRAIN_ENV-LIBTPU_INIT_ARGS}; do
    if [[ -n "${!name:-}" ]]; then
      given+="${name}=${!name} "
    fi
  done
  echo "$(date -u '+%F %T') $(hostname): ${given}python -m electra_jax.main $*" | tee -a "${log}"
  local status=0
  python -m electra_jax.main "$@" 2>&1 | tee -a "${log}" || status=$?
  echo "$(date -u '+%F %T') $(hostname): electra_jax.main exited with status ${status}" \
    | tee -a "${log}"
  return "${status}"
}

main() {
  local command="${1:-}"
  if [[ $# -lt 2 || ( "${command}" != start && "${command}" != run ) ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
  fi
  shift
  "${command}" "$@"
}

main "$@"
