#!/usr/bin/env bash
# Pretrains electra_jax on a single Cloud TPU VM (one host: v4-8, v5litepod-8, ...).
#
#   launch/tpu_vm.sh [--dry-run] COMMAND [COMMAND ...]
#
# Commands, in the order of a run:
#   create   create the TPU VM
#   setup    copy this checkout (or clone REPO_URL) to the VM and install it there
#   data     copy the corpus (DATA_SOURCE) to the VM
#   train    start pretraining in a tmux session on the VM; running it again resumes the run
#   logs     follow the training log (Ctrl-C stops following, not training)
#   export   export the latest checkpoint for Hugging Face, on the VM (runs/RUN_NAME/hf)
#   save     copy the whole run from the VM to RESULTS_URI (checkpoints included)
#   fetch    copy the run's log, metrics, config and export to LOCAL_RESULTS on this machine
#   ssh      open a shell on the VM (`tmux attach -t electra` there shows the run)
#   delete   delete the TPU VM (it is billed until then)
#
# Example: launch/tpu_vm.sh create setup data train logs
# --dry-run (or DRY_RUN=1), anywhere on the line, prints the commands without running them.
set -euo pipefail

# ---- Settings. Edit them here, or set any of them in the environment:
#      PROJECT=my-project BUCKET=gs://my-bucket launch/tpu_vm.sh create
PROJECT="${PROJECT:-my-gcp-project}"              # Google Cloud project that pays for the TPU
ZONE="${ZONE:-}"                                   # '' = one that has ACCELERATOR_TYPE (lib.sh)
TPU_NAME="${TPU_NAME:-electra-tpu}"                # name of the TPU VM
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-8}"       # one host: v4-8, v5litepod-8, v6e-8
RUNTIME_VERSION="${RUNTIME_VERSION:-}"             # OS image; '' = ACCELERATOR_TYPE's:
                                                   # tpu-ubuntu2204-base (v4), v2-alpha-tpuv5-lite
                                                   # (v5e), v2-alpha-tpuv5 (v5p), v2-alpha-tpuv6e (v6e)
SPOT="${SPOT:-0}"                                  # 1: a spot VM, far cheaper but preemptible
SCOPES="${SCOPES:-https://www.googleapis.com/auth/cloud-platform}"  # lets the VM use the bucket
BUCKET="${BUCKET:-gs://my-bucket}"                 # Cloud Storage bucket for the corpus and results
CONFIG="${CONFIG:-base}"                           # model size: configs/<CONFIG>.py
RUN_NAME="${RUN_NAME:-${CONFIG}}"                  # the run's workdir on the VM is ~/runs/<RUN_NAME>
DATA_SOURCE="${DATA_SOURCE:-${BUCKET}/corpus}"     # the corpus: a gs:// folder, or a local file or folder
TRAIN_FILES="${TRAIN_FILES:-data/corpus/*}"        # training text on the VM (glob; relative to ~)
EVAL_FILES="${EVAL_FILES:-}"                       # evaluation text on the VM ('' = no evaluation)
EXTRA_FLAGS="${EXTRA_FLAGS:-}"                     # more flags for electra_jax.main, space-separated,
                                                   # e.g. '--config.num_train_steps=20000'
LIBTPU_INIT_ARGS="${LIBTPU_INIT_ARGS:-}"           # libtpu settings for the training processes, e.g.
                                                   # '--xla_tpu_spmd_rng_bit_generator_unsafe=true'
                                                   # with --config.rng_impl=rbg (docs/performance.md)
TRAIN_ENV="${TRAIN_ENV:-LIBTPU_INIT_ARGS}"         # names (space-separated) of this shell's
                                                   # variables that reach the training processes, e.g.
                                                   # 'LIBTPU_INIT_ARGS TPU_STDERR_LOG_LEVEL'
RESULTS_URI="${RESULTS_URI:-${BUCKET}/runs/${RUN_NAME}}"  # where `save` copies the run
LOCAL_RESULTS="${LOCAL_RESULTS:-results/${RUN_NAME}}"    # where `fetch` copies the run, here
REPO_URL="${REPO_URL:-}"                           # '' copies this checkout; a git URL is cloned instead
DRY_RUN="${DRY_RUN:-0}"                            # 1: print the commands, run nothing

# Paths on the VM, relative to the home directory there. launch/remote_*.sh use the same ones.
REMOTE_CODE="electra_jax"                          # the source tree (installed with pip install -e)
REMOTE_WORKDIR="runs/${RUN_NAME}"                  # the run's workdir
REMOTE_LOG="${REMOTE_WORKDIR}/train.log"           # the training log
REMOTE_DATA="data/corpus"                          # where `data` puts the corpus
REMOTE_VENV="electra_venv"                         # the virtual environment remote_setup.sh makes
SOURCE_TARBALL="${TMPDIR:-/tmp}/electra_jax_source.tar.gz"  # this checkout, packed by `setup`

# shellcheck source=launch/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- Helpers.

# Runs a command line ($1) on the VM.
vm_ssh() {
  run gcloud compute tpus tpu-vm ssh "${TPU_NAME}" --project="${PROJECT}" --zone="${ZONE}" \
    --command="$1"
}

# Copies with scp to or from the VM; the VM's paths are written TPU_NAME:PATH.
vm_scp() {
  run gcloud compute tpus tpu-vm scp --project="${PROJECT}" --zone="${ZONE}" "$@"
}

# ---- Commands.

create() {
  step "Create the TPU VM ${TPU_NAME} (${ACCELERATOR_TYPE}, ${RUNTIME_VERSION}) in ${ZONE}"
  local spot_flag=()
  if [[ "${SPOT}" == 1 ]]; then
    spot_flag=(--spot)
  fi
  run gcloud compute tpus tpu-vm create "${TPU_NAME}" --project="${PROJECT}" --zone="${ZONE}" \
    --accelerator-type="${ACCELERATOR_TYPE}" --version="${RUNTIME_VERSION}" \
    --scopes="${SCOPES}" ${spot_flag[@]+"${spot_flag[@]}"}
}

setup() {
  if [[ -n "${REPO_URL}" ]]; then
    step "Clone ${REPO_URL} on the VM (or update the clone) and install it"
    vm_ssh "$(remote_command git clone "${REPO_URL}" "${REMOTE_CODE}") || $(remote_command \
      git -C "${REMOTE_CODE}" pull --ff-only) && bash ${REMOTE_CODE}/launch/remote_setup.sh"
  else
    pack_source "${SOURCE_TARBALL}"
    step "Copy the source tree to the VM, unpack it into ~/${REMOTE_CODE} and install it"
    vm_scp "${SOURCE_TARBALL}" "${TPU_NAME}:electra_jax_source.tar.gz"
    vm_ssh "rm -rf ${REMOTE_CODE} && mkdir -p ${REMOTE_CODE} && tar -xzf electra_jax_source.tar.gz \
-C ${REMOTE_CODE} && bash ${REMOTE_CODE}/launch/remote_setup.sh"
  fi
}

data() {
  step "Copy the corpus ${DATA_SOURCE} to ~/${REMOTE_DATA} on the VM"
  if [[ "${DATA_SOURCE}" == gs://* ]]; then
    vm_ssh "mkdir -p ${REMOTE_DATA} && $(remote_command gcloud storage rsync --recursive \
      "${DATA_SOURCE}" "${REMOTE_DATA}")"
  else
    if [[ "${DRY_RUN}" != 1 && ! -e "${DATA_SOURCE}" ]]; then
      die "DATA_SOURCE=${DATA_SOURCE} does not exist"
    fi
    vm_ssh "mkdir -p ${REMOTE_DATA}"
    if [[ -d "${DATA_SOURCE}" ]]; then  # the folder's files, not the folder
      vm_scp --recurse "${DATA_SOURCE}"/* "${TPU_NAME}:${REMOTE_DATA}/"
    else
      vm_scp "${DATA_SOURCE}" "${TPU_NAME}:${REMOTE_DATA}/"
    fi
  fi
}

train() {
  step "Start pretraining in the tmux session 'electra' on the VM (log: ~/${REMOTE_LOG})"
  vm_ssh "$(remote_train_command "${REMOTE_WORKDIR}")"
}

logs() {
  step "Follow the training log (Ctrl-C stops following; training goes on)"
  vm_ssh "tail -n 50 -F ${REMOTE_LOG}"
}

export_hf() {
  step "Export the latest checkpoint for Hugging Face to ~/${REMOTE_WORKDIR}/hf on the VM"
  # On the CPU: the TPU may still be busy training, and the export needs no accelerator.
  vm_ssh "JAX_PLATFORMS=cpu ${REMOTE_VENV}/bin/python -m electra_jax.export --workdir=${REMOTE_WORKDIR} \
--out=${REMOTE_WORKDIR}/hf --overwrite"
}

save() {
  step "Copy the run from the VM to ${RESULTS_URI}"
  vm_ssh "$(remote_command gcloud storage rsync --recursive "${REMOTE_WORKDIR}" "${RESULTS_URI}")"
}

fetch() {
  step "Copy the run's log, metrics, config and export from the VM to ${LOCAL_RESULTS}"
  run mkdir -p "${LOCAL_RESULTS}"
  vm_scp --recurse "${TPU_NAME}:${REMOTE_LOG}" \
    "${TPU_NAME}:${REMOTE_WORKDIR}/metrics.jsonl" "${TPU_NAME}:${REMOTE_WORKDIR}/config.json" \
    "${TPU_NAME}:${REMOTE_WORKDIR}/hf" "${LOCAL_RESULTS}/"
}

open_shell() {
  step "Open a shell on the VM"
  run gcloud compute tpus tpu-vm ssh "${TPU_NAME}" --project="${PROJECT}" --zone="${ZONE}"
}

delete() {
  step "Delete the TPU VM ${TPU_NAME} (copy what you need first: its disk goes with it)"
  run gcloud compute tpus tpu-vm delete "${TPU_NAME}" --project="${PROJECT}" --zone="${ZONE}" \
    --quiet
}

main() {
  parse_arguments "$@"
  check_launch "create setup data train logs export save fetch ssh delete" ${COMMANDS[@]+"${COMMANDS[@]}"}
  if [[ " ${COMMANDS[*]-} " == *" save "* ]]; then
    require_setting RESULTS_URI gs://my-bucket
  fi
  note_placeholders
  run_commands ${COMMANDS[@]+"${COMMANDS[@]}"}
}

main "$@"
