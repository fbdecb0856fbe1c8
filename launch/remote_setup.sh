#!/usr/bin/env bash
# Runs ON a TPU VM (on every worker of a slice), from the home directory; launch/tpu_vm.sh and
# launch/tpu_pod.sh start it after copying the code to ~/electra_jax. On a GPU VM, run it by hand
# with JAX_EXTRA=cuda12 (docs/gpu.md).
#
#   [JAX_EXTRA=tpu|cuda12|cuda13|cpu] bash electra_jax/launch/remote_setup.sh [--multihost]
#
# Installs the checkout it is part of into a virtual environment with the `gcs` extra (a run's
# workdir may be a gs:// folder, as on a slice) and JAX's JAX_EXTRA build: tpu by default, as on a
# TPU VM; cuda12 or cuda13 on a Linux VM with NVIDIA GPUs; cpu. Then it prints the devices JAX
# sees. --multihost: the VM is one worker of a multi-host TPU slice, so the device check first
# joins the other workers (jax.distributed.initialize) and counts the devices of the whole slice.
# Running it again updates the installation.
set -euo pipefail

# ---- Settings.
# The source tree: the checkout holding this script (~/electra_jax, REMOTE_CODE in tpu_vm.sh /
# tpu_pod.sh, when they start it).
CODE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_DIR="${HOME}/electra_venv"       # the virtual environment (REMOTE_VENV there)
JAX_EXTRA="${JAX_EXTRA:-tpu}"         # JAX's pip extra: tpu (libtpu), cuda12, cuda13 or cpu
APT_PYTHON="python3.11"               # installed from apt when no Python >= 3.11 is found
                                      # (Ubuntu 22.04 TPU images come with Python 3.10)

log() {
  printf '[remote_setup %s] %s\n' "$(hostname)" "$*"
}

# Prints the newest python3.X (X >= 11) that can create a virtual environment, if there is one.
find_python() {
  local candidate
  for candidate in python3.13 python3.12 python3.11; do
    if command -v "${candidate}" > /dev/null && "${candidate}" -c 'import ensurepip, venv' 2> /dev/null; then
      printf '%s\n' "${candidate}"
      return 0
    fi
  done
  return 1
}

install_python() {
  log "no Python >= 3.11 with venv found; installing ${APT_PYTHON} from apt"
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${APT_PYTHON}" "${APT_PYTHON}-venv"
}

main() {
  case "${JAX_EXTRA}" in
    tpu|cuda12|cuda13|cpu) ;;
    *)
      printf 'error: JAX_EXTRA=%s: use tpu (a TPU VM), cuda12 or cuda13 (NVIDIA GPUs) or cpu\n' \
        "${JAX_EXTRA}" >&2
      exit 1 ;;
  esac
  local jax_package="jax[${JAX_EXTRA}]"
  local multihost=0
  if [[ "${1:-}" == --multihost ]]; then
    multihost=1
  fi

  local python
  if ! python="$(find_python)"; then
    install_python
    python="${APT_PYTHON}"
  fi
  if [[ ! -x "${VENV_DIR}/bin/python" ]]; then
    log "creating ${VENV_DIR} with ${python}"
    "${python}" -m venv "${VENV_DIR}"
  fi

  log "installing ${CODE_DIR} (with the gcs extra) and ${jax_package}"
  "${VENV_DIR}/bin/python" -m pip install --quiet --upgrade pip
  "${VENV_DIR}/bin/python" -m pip install --quiet -e "${CODE_DIR}[gcs]"
  "${VENV_DIR}/bin/python" -m pip install --quiet --upgrade "${jax_package}"

  log "devices JAX sees:"
  "${VENV_DIR}/bin/python" - "${multihost}" <<'EOF'
import sys
import jax
if sys.argv[1] == '1':
  jax.distributed.initialize()  # joins the other workers; every worker runs this at once
print(f'jax {jax.__version__}: process {jax.process_index()} of {jax.process_count()}, '
      f'{jax.local_device_count()} local and {jax.device_count()} global devices '
      f'({jax.devices()[0].device_kind})')
EOF
}

main "$@"
