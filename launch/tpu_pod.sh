#!/usr/bin/env bash
# Pretrains electra_jax on a multi-host Cloud TPU slice (v4-32, v5litepod-32, ...), requested as a
# queued resource. Every worker (host) of the slice runs the same training command; JAX joins
# them into one program.
#
#   launch/tpu_pod.sh [--dry-run] COMMAND [COMMAND ...]
#
# Commands, in the order of a run:
#   create   queue the request for the slice, then wait until it is ACTIVE (can take a while)
#   wait     wait until the slice is ACTIVE (after a `create` that was interrupted)
#   status   show the queued resource and its state
#   setup    copy this checkout (or clone REPO_URL) to every worker and install it there
#   data     copy the corpus (a gs:// folder) to every worker
#   train    start pretraining in a tmux session on every worker; running it again resumes
#   logs     follow worker 0's training log (Ctrl-C stops following, not training)
#   export   export the latest checkpoint for Hugging Face, on worker 0 (~/runs/RUN_NAME-hf)
#   fetch    copy the metrics, config, worker 0's log and the export to LOCAL_RESULTS
#   ssh      open a shell on worker 0
#   delete   delete the queued resource and the slice with it (it is billed until then)
#
# Example: launch/tpu_pod.sh create setup data train logs
# --dry-run (or DRY_RUN=1), anywhere on the line, prints the commands without running them.
#
# The workdir is WORKDIR, a gs:// folder: all workers write parts of each Orbax checkpoint, so
# they need storage they all reach (`setup` installs the gcs extra that reads and writes it).
# Each worker prepares the corpus into its own local data.local_dir (default
# ~/.cache/electra_jax/<hash of WORKDIR>) and keeps its own log at ~/runs/RUN_NAME.log; see
# "A multi-host slice" in docs/tpu.md.
set -euo pipefail

# ---- Settings. Edit them here, or set any of them in the environment:
#      PROJECT=my-project BUCKET=gs://my-bucket launch/tpu_pod.sh create
PROJECT="${PROJECT:-my-gcp-project}"              # Google Cloud project that pays for the TPU
ZONE="${ZONE:-}"                                   # '' = one that has ACCELERATOR_TYPE (lib.sh)
TPU_NAME="${TPU_NAME:-electra-pod}"                # name of the slice (the queued resource's node)
QUEUED_RESOURCE="${QUEUED_RESOURCE:-${TPU_NAME}-request}"  # name of the queued resource
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-32}"      # several hosts: v4-32 (4 hosts), v5litepod-32, ...
RUNTIME_VERSION="${RUNTIME_VERSION:-}"             # OS image; '' = ACCELERATOR_TYPE's:
                                                   # tpu-ubuntu2204-base (v4), v2-alpha-tpuv5-lite
                                                   # (v5e), v2-alpha-tpuv5 (v5p), v2-alpha-tpuv6e (v6e)
SPOT="${SPOT:-0}"                                  # 1: spot capacity, far cheaper but preemptible
SCOPES="${SCOPES:-https://www.googleapis.com/auth/cloud-platform}"  # lets the VMs use the bucket
WAIT_SECONDS="${WAIT_SECONDS:-60}"                 # how often `wait` asks for the slice's state
BUCKET="${BUCKET:-gs://my-bucket}"                 # Cloud Storage bucket for corpus, run and results
CONFIG="${CONFIG:-base}"                           # model size: configs/<CONFIG>.py
RUN_NAME="${RUN_NAME:-${CONFIG}-pod}"              # names the workdir and the logs
WORKDIR="${WORKDIR:-${BUCKET}/runs/${RUN_NAME}}"   # the run's workdir, shared by all workers
DATA_SOURCE="${DATA_SOURCE:-${BUCKET}/corpus}"     # the corpus: a gs:// folder of text files
TRAIN_FILES="${TRAIN_FILES:-data/corpus/*}"        # training text on each worker (glob; relative to ~)
EVAL_FILES="${EVAL_FILES:-}"                       # evaluation text on each worker ('' = none)
EXTRA_FLAGS="${EXTRA_FLAGS:-}"                     # more flags for electra_jax.main, space-separated,
                                                   # e.g. '--config.batch_size=1024'
LIBTPU_INIT_ARGS="${LIBTPU_INIT_ARGS:-}"           # libtpu settings for the training processes, e.g.
                                                   # '--xla_tpu_spmd_rng_bit_generator_unsafe=true'
                                                   # with --config.rng_impl=rbg (docs/performance.md)
TRAIN_ENV="${TRAIN_ENV:-LIBTPU_INIT_ARGS}"         # names (space-separated) of this shell's
                                                   # variables that reach the training processes, e.g.
                                                   # 'LIBTPU_INIT_ARGS TPU_STDERR_LOG_LEVEL'
LOCAL_RESULTS="${LOCAL_RESULTS:-results/${RUN_NAME}}"    # where `fetch` copies results, here
REPO_URL="${REPO_URL:-}"                           # '' copies this checkout; a git URL is cloned instead
DRY_RUN="${DRY_RUN:-0}"                            # 1: print the commands, run nothing

# Paths on each worker, relative to the home directory there. launch/remote_*.sh use the same.
REMOTE_CODE="electra_jax"                          # the source tree (installed with pip install -e)
REMOTE_VENV="electra_venv"                         # the virtual environment remote_setup.sh makes
REMOTE_DATA="data/corpus"                          # where `data` puts the corpus
REMOTE_LOG="runs/${RUN_NAME}.log"                  # each worker's training log
REMOTE_EXPORT="runs/${RUN_NAME}-hf"                # where `export` writes, on worker 0
SOURCE_TARBALL="${TMPDIR:-/tmp}/electra_jax_source.tar.gz"  # this checkout, packed by `setup`

# shellcheck source=launch/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- Helpers.

# Runs a command line ($2) on worker $1: a number, or `all` for every worker at once.
pod_ssh() {
  run gcloud compute tpus tpu-vm ssh "${TPU_NAME}" --project="${PROJECT}" --zone="${ZONE}" \
    --worker="$1" --command="$2"
}

# Copies with scp to or from worker $1 (a number or `all`); its paths are written TPU_NAME:PATH.
pod_scp() {
  local worker="$1"
  shift
  run gcloud compute tpus tpu-vm scp --project="${PROJECT}" --zone="${ZONE}" --worker="${worker}" \
    "$@"
}

# Prints the queued resource's state: WAITING_FOR_RESOURCES, PROVISIONING, ACTIVE, FAILED, ...
queued_state() {
  gcloud compute tpus queued-resources describe "${QUEUED_RESOURCE}" --project="${PROJECT}" \
    --zone="${ZONE}" --format='value(state.state)'
}

# ---- Commands.

create() {
  step "Queue a request for the slice ${TPU_NAME} (${ACCELERATOR_TYPE}, ${RUNTIME_VERSION}) in ${ZONE}"
  local spot_flag=()
  if [[ "${SPOT}" == 1 ]]; then
    spot_flag=(--spot)
  fi
  run gcloud compute tpus queued-resources create "${QUEUED_RESOURCE}" --project="${PROJECT}" \
    --zone="${ZONE}" --node-id="${TPU_NAME}" --accelerator-type="${ACCELERATOR_TYPE}" \
    --runtime-version="${RUNTIME_VERSION}" --scopes="${SCOPES}" ${spot_flag[@]+"${spot_flag[@]}"}
  wait_active
}

wait_active() {
  step "Wait until the queued resource ${QUEUED_RESOURCE} is ACTIVE (asking every ${WAIT_SECONDS}s)"
  if [[ "${DRY_RUN}" == 1 ]]; then
    print_command gcloud compute tpus queued-resources describe "${QUEUED_RESOURCE}" \
      --project="${PROJECT}" --zone="${ZONE}" --format='value(state.state)'
    printf '# ... repeated until it prints ACTIVE\n'
    return
  fi
  local state
  while true; do
    state="$(queued_state)"
    printf '%s  %s: %s\n' "$(date '+%H:%M:%S')" "${QUEUED_RESOURCE}" "${state}" >&2
    case "${state}" in
      ACTIVE) return 0 ;;
      FAILED|SUSPENDED|SUSPENDING|DELETING)
        die "the queued resource is ${state}; see: $0 status" ;;
    esac
    sleep "${WAIT_SECONDS}"
  done
}

status() {
  step "Show the queued resource ${QUEUED_RESOURCE}"
  run gcloud compute tpus queued-resources describe "${QUEUED_RESOURCE}" --project="${PROJECT}" \
    --zone="${ZONE}"
}

setup() {
  if [[ -n "${REPO_URL}" ]]; then
    step "Clone ${REPO_URL} on every worker (or update the clones) and install it"
    pod_ssh all "$(remote_command git clone "${REPO_URL}" "${REMOTE_CODE}") || $(remote_command \
      git -C "${REMOTE_CODE}" pull --ff-only) && bash ${REMOTE_CODE}/launch/remote_setup.sh --multihost"
  else
    pack_source "${SOURCE_TARBALL}"
    step "Copy the source tree to every worker, unpack it into ~/${REMOTE_CODE} and install it"
    pod_scp all "${SOURCE_TARBALL}" "${TPU_NAME}:electra_jax_source.tar.gz"
    pod_ssh all "rm -rf ${REMOTE_CODE} && mkdir -p ${REMOTE_CODE} && tar -xzf \
electra_jax_source.tar.gz -C ${REMOTE_CODE} && bash ${REMOTE_CODE}/launch/remote_setup.sh --multihost"
  fi
}

data() {
  step "Copy the corpus ${DATA_SOURCE} to ~/${REMOTE_DATA} on every worker"
  if [[ "${DATA_SOURCE}" != gs://* ]]; then
    die "DATA_SOURCE=${DATA_SOURCE}: on a slice the corpus comes from a gs:// folder"
  fi
  pod_ssh all "mkdir -p ${REMOTE_DATA} && $(remote_command gcloud storage rsync --recursive \
    "${DATA_SOURCE}" "${REMOTE_DATA}")"
}

train() {
  step "Start pretraining in the tmux session 'electra' on every worker (logs: ~/${REMOTE_LOG})"
  pod_ssh all "$(remote_train_command "${WORKDIR}")"
}

logs() {
  step "Follow worker 0's training log (Ctrl-C stops following; training goes on)"
  pod_ssh 0 "tail -n 50 -F ${REMOTE_LOG}"
}

export_hf() {
  step "Export the latest checkpoint for Hugging Face to ~/${REMOTE_EXPORT} on worker 0"
  # On the CPU: the TPU may still be busy training, and the export needs no accelerator.
  pod_ssh 0 "$(remote_command JAX_PLATFORMS=cpu "${REMOTE_VENV}/bin/python" -m \
    electra_jax.export --workdir="${WORKDIR}" --out="${REMOTE_EXPORT}" --overwrite)"
}

fetch() {
  step "Copy the metrics, config, worker 0's log and the export to ${LOCAL_RESULTS}"
  run mkdir -p "${LOCAL_RESULTS}"
  run gcloud storage cp "${WORKDIR}/metrics.jsonl" "${WORKDIR}/config.json" "${LOCAL_RESULTS}/"
  pod_scp 0 --recurse "${TPU_NAME}:${REMOTE_LOG}" "${TPU_NAME}:${REMOTE_EXPORT}" "${LOCAL_RESULTS}/"
}

open_shell() {
  step "Open a shell on worker 0"
  run gcloud compute tpus tpu-vm ssh "${TPU_NAME}" --project="${PROJECT}" --zone="${ZONE}" \
    --worker=0
}

delete() {
  step "Delete the queued resource ${QUEUED_RESOURCE} and the slice ${TPU_NAME} with it"
  run gcloud compute tpus queued-resources delete "${QUEUED_RESOURCE}" --project="${PROJECT}" \
    --zone="${ZONE}" --force --quiet
}

main() {
  parse_arguments "$@"
  check_launch "create wait status setup data train logs export fetch ssh delete" \
    ${COMMANDS[@]+"${COMMANDS[@]}"}
  if [[ " ${COMMANDS[*]-} " == *" train "* || " ${COMMANDS[*]-} " == *" export "* ||
        " ${COMMANDS[*]-} " == *" fetch "* ]]; then
    require_setting WORKDIR gs://my-bucket
  fi
  note_placeholders
  run_commands ${COMMANDS[@]+"${COMMANDS[@]}"}
}

main "$@"
