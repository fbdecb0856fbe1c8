"""launch/: the TPU scripts (syntax, shellcheck, the commands their dry runs print, the script that
runs on the VM) and the Colab notebook (valid nbformat; executed top to bottom on the CPU)."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO

LAUNCH = REPO / 'launch'
SCRIPTS = sorted(LAUNCH.glob('*.sh'))
NOTEBOOK = LAUNCH / 'colab.ipynb'
# Settings that the user's environment could hold and that would change what the scripts print.
SETTINGS = ('PROJECT', 'ZONE', 'TPU_NAME', 'QUEUED_RESOURCE', 'ACCELERATOR_TYPE', 'RUNTIME_VERSION',
            'SPOT', 'SCOPES', 'WAIT_SECONDS', 'BUCKET', 'CONFIG', 'RUN_NAME', 'WORKDIR',
            'DATA_SOURCE', 'TRAIN_FILES', 'EVAL_FILES', 'EXTRA_FLAGS', 'RESULTS_URI',
            'LOCAL_RESULTS', 'REPO_URL', 'DRY_RUN', 'LIBTPU_INIT_ARGS', 'TRAIN_ENV',
            'ELECTRA_TRAIN_ENV', 'JAX_EXTRA')


def script_env(tmp_path, **settings):
  env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
  env['TMPDIR'] = str(tmp_path)  # where `setup` would pack the source tree
  env.update(settings)
  return env


def run_script(name, *args, env):
  return subprocess.run(['bash', str(LAUNCH / name), *args], env=env, capture_output=True,
                        text=True, timeout=60, check=False)


def test_the_launch_scripts_exist():
  assert {p.name for p in SCRIPTS} >= {'tpu_vm.sh', 'tpu_pod.sh', 'remote_setup.sh',
                                       'remote_train.sh', 'lib.sh'}


@pytest.mark.parametrize('script', SCRIPTS, ids=lambda p: p.name)
def test_script_syntax(script):
  result = subprocess.run(['bash', '-n', str(script)], capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr


def test_shellcheck():
  if shutil.which('shellcheck') is None:
    pytest.skip('shellcheck is not installed (apt-get install -y shellcheck)')
  result = subprocess.run(['shellcheck', '-x', *[str(p.relative_to(REPO)) for p in SCRIPTS]],
                          cwd=REPO, capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stdout + result.stderr


def test_single_vm_dry_run_prints_the_gcloud_commands_for_a_v4_8(tmp_path):
  env = script_env(tmp_path, PROJECT='my-project', BUCKET='gs://my-bucket-1')
  result = run_script('tpu_vm.sh', '--dry-run', 'create', 'setup', 'data', 'train', 'logs',
                      'export', 'save', 'fetch', 'delete', env=env)
  assert result.returncode == 0, result.stderr
  out = result.stdout
  where = '--project=my-project --zone=us-central2-b'
  expected = [
      f'gcloud compute tpus tpu-vm create electra-tpu {where} --accelerator-type=v4-8 '
      '--version=tpu-ubuntu2204-base',
      f'gcloud compute tpus tpu-vm scp {where} {tmp_path}/electra_jax_source.tar.gz '
      'electra-tpu:electra_jax_source.tar.gz',
      f"gcloud compute tpus tpu-vm ssh electra-tpu {where} --command='rm -rf electra_jax && ",
      'bash electra_jax/launch/remote_setup.sh',
      f"gcloud compute tpus tpu-vm ssh electra-tpu {where} --command='mkdir -p data/corpus && "
      "gcloud storage rsync --recursive gs://my-bucket-1/corpus data/corpus'",
      f"gcloud compute tpus tpu-vm ssh electra-tpu {where} --command='bash "
      'electra_jax/launch/remote_train.sh start runs/base/train.log '
      '--config=electra_jax/configs/base.py --workdir=runs/base '
      '--config.data.train_files="data/corpus/*"\'',
      "--command='tail -n 50 -F runs/base/train.log'",
      '-m electra_jax.export --workdir=runs/base --out=runs/base/hf',
      "--command='gcloud storage rsync --recursive runs/base gs://my-bucket-1/runs/base'",
      f'gcloud compute tpus tpu-vm delete electra-tpu {where} --quiet',
  ]
  for line in expected:
    assert line in out, f'{line!r} not in the dry-run output:\n{out}'
  assert '--worker' not in out  # one host
  assert not list(tmp_path.iterdir()), 'a dry run must not pack the source tree'
  # The output is itself a shell script.
  assert subprocess.run(['bash', '-n'], input=out, text=True, check=False).returncode == 0


def test_pod_dry_run_prints_the_queued_resource_and_all_worker_commands_for_a_v4_32(tmp_path):
  env = script_env(tmp_path, PROJECT='my-project', BUCKET='gs://my-bucket-1', SPOT='1')
  result = run_script('tpu_pod.sh', '--dry-run', 'create', 'setup', 'data', 'train', 'logs',
                      'export', 'fetch', 'delete', env=env)
  assert result.returncode == 0, result.stderr
  out = result.stdout
  where = '--project=my-project --zone=us-central2-b'
  expected = [
      f'gcloud compute tpus queued-resources create electra-pod-request {where} '
      '--node-id=electra-pod --accelerator-type=v4-32 --runtime-version=tpu-ubuntu2204-base',
      '--spot',
      f"gcloud compute tpus queued-resources describe electra-pod-request {where} "
      "--format='value(state.state)'",
      f'gcloud compute tpus tpu-vm scp {where} --worker=all',
      f"gcloud compute tpus tpu-vm ssh electra-pod {where} --worker=all --command='rm -rf",
      'bash electra_jax/launch/remote_setup.sh --multihost',
      f"gcloud compute tpus tpu-vm ssh electra-pod {where} --worker=all --command='mkdir -p "
      "data/corpus && gcloud storage rsync --recursive gs://my-bucket-1/corpus data/corpus'",
      f"gcloud compute tpus tpu-vm ssh electra-pod {where} --worker=all --command='bash "
      'electra_jax/launch/remote_train.sh start runs/base-pod.log '
      '--config=electra_jax/configs/base.py --workdir=gs://my-bucket-1/runs/base-pod',
      f"gcloud compute tpus tpu-vm ssh electra-pod {where} --worker=0 --command='tail -n 50 -F "
      "runs/base-pod.log'",
      'gcloud storage cp gs://my-bucket-1/runs/base-pod/metrics.jsonl',
      f'gcloud compute tpus queued-resources delete electra-pod-request {where} --force --quiet',
  ]
  for line in expected:
    assert line in out, f'{line!r} not in the dry-run output:\n{out}'
  assert subprocess.run(['bash', '-n'], input=out, text=True, check=False).returncode == 0


def test_settings_come_from_the_environment(tmp_path):
  env = script_env(tmp_path, PROJECT='p', ZONE='us-west4-a', ACCELERATOR_TYPE='v5litepod-8',
                   RUNTIME_VERSION='v2-alpha-tpuv5-lite', TPU_NAME='small-run', CONFIG='small',
                   EXTRA_FLAGS='--config.num_train_steps=1000 --config.batch_size=256')
  result = run_script('tpu_vm.sh', '--dry-run', 'create', 'train', env=env)
  assert result.returncode == 0, result.stderr
  assert ('gcloud compute tpus tpu-vm create small-run --project=p --zone=us-west4-a '
          '--accelerator-type=v5litepod-8 --version=v2-alpha-tpuv5-lite') in result.stdout
  assert ('--config=electra_jax/configs/small.py --workdir=runs/small '
          '--config.data.train_files="data/corpus/*" --config.num_train_steps=1000 '
          '--config.batch_size=256') in result.stdout
  assert 'LIBTPU_INIT_ARGS' not in result.stdout  # unset: the command reads as before
  flag = '--xla_tpu_spmd_rng_bit_generator_unsafe=true'
  for script in ('tpu_vm.sh', 'tpu_pod.sh'):  # libtpu's settings reach the training processes
    told = run_script(script, '--dry-run', 'train', env={**env, 'LIBTPU_INIT_ARGS': flag})
    assert told.returncode == 0, told.stderr
    assert (f"--command='env LIBTPU_INIT_ARGS={flag} ELECTRA_TRAIN_ENV=LIBTPU_INIT_ARGS bash "
            'electra_jax/launch/remote_train.sh start ') in told.stdout, told.stdout
  # Any variable TRAIN_ENV names reaches them too, spaces kept; names set to nothing are left out.
  named = {**env, 'TRAIN_ENV': 'LIBTPU_INIT_ARGS TPU_STDERR_LOG_LEVEL XLA_FLAGS',
           'TPU_STDERR_LOG_LEVEL': '0', 'XLA_FLAGS': '--xla_dump_to=/tmp/x --xla_dump_hlo_as_text'}
  for script in ('tpu_vm.sh', 'tpu_pod.sh'):
    told = run_script(script, '--dry-run', 'train', env=named)
    assert told.returncode == 0, told.stderr
    assert ('--command=\'env TPU_STDERR_LOG_LEVEL=0 "XLA_FLAGS=--xla_dump_to=/tmp/x '
            '--xla_dump_hlo_as_text" "ELECTRA_TRAIN_ENV=TPU_STDERR_LOG_LEVEL XLA_FLAGS" bash '
            'electra_jax/launch/remote_train.sh start ') in told.stdout, told.stdout
    refused = run_script(script, '--dry-run', 'train', env={**named, 'TRAIN_ENV': 'XLA_FLAGS=1'})
    assert refused.returncode != 0 and refused.stderr.strip() == (
        "error: TRAIN_ENV='XLA_FLAGS=1': 'XLA_FLAGS=1' is not a variable name; list the names of "
        "the variables to pass, e.g. TRAIN_ENV='LIBTPU_INIT_ARGS TPU_STDERR_LOG_LEVEL'")


def test_placeholder_settings_are_refused_before_anything_runs(tmp_path):
  result = run_script('tpu_vm.sh', 'create', env=script_env(tmp_path))
  assert result.returncode == 1
  assert 'set PROJECT' in result.stderr
  result = run_script('tpu_pod.sh', 'data', env=script_env(tmp_path, PROJECT='p'))
  assert result.returncode == 1
  assert 'set DATA_SOURCE' in result.stderr


@pytest.mark.parametrize('script', ['tpu_vm.sh', 'tpu_pod.sh'])
def test_unknown_commands_are_refused_with_the_usage(tmp_path, script):
  result = run_script(script, '--dry-run', 'create', 'craete', env=script_env(tmp_path))
  assert result.returncode == 2
  assert 'unknown command: craete' in result.stderr
  assert 'Commands, in the order of a run' in result.stderr
  assert result.stdout == ''  # checked before anything runs or is printed


FAKE_GCLOUD = """#!/usr/bin/env bash
# Records its arguments; `queued-resources describe` answers with the states in $STATES, in turn.
printf '%s\\n' "$*" >> "$GCLOUD_LOG"
if [[ "$*" == *"queued-resources describe"* ]]; then
  read -r -a states <<< "$STATES"
  calls=$(grep -c 'queued-resources describe' "$GCLOUD_LOG")
  echo "${states[$((calls - 1))]}"
fi
"""


def fake_gcloud_env(tmp_path, states=''):
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  (bin_dir / 'gcloud').write_text(FAKE_GCLOUD)
  (bin_dir / 'gcloud').chmod(0o755)
  env = script_env(tmp_path, PROJECT='p', BUCKET='gs://b', WAIT_SECONDS='0', STATES=states,
                   GCLOUD_LOG=str(tmp_path / 'gcloud.log'))
  env['PATH'] = f'{bin_dir}:{env["PATH"]}'
  return env


# Each TPU generation's runtime version and a zone that offers it (Cloud TPU docs: "TPU software
# versions", "TPU regions and zones").
GENERATIONS = [('tpu_vm.sh', 'v5litepod-8', 'v2-alpha-tpuv5-lite', 'us-west4-a'),
               ('tpu_vm.sh', 'v5p-8', 'v2-alpha-tpuv5', 'us-east5-a'),
               ('tpu_vm.sh', 'v6e-8', 'v2-alpha-tpuv6e', 'us-east5-b'),
               ('tpu_pod.sh', 'v5litepod-32', 'v2-alpha-tpuv5-lite', 'us-west4-a'),
               ('tpu_pod.sh', 'v6e-32', 'v2-alpha-tpuv6e', 'us-east5-b')]


@pytest.mark.parametrize('script,accelerator,runtime,zone', GENERATIONS,
                         ids=[f'{g[0]}-{g[1]}' for g in GENERATIONS])
def test_the_runtime_and_zone_follow_the_accelerator_type(tmp_path, script, accelerator, runtime,
                                                          zone):
  env = script_env(tmp_path, PROJECT='p', ACCELERATOR_TYPE=accelerator)
  result = run_script(script, '--dry-run', 'create', env=env)
  assert result.returncode == 0, result.stderr
  flag = '--version' if script == 'tpu_vm.sh' else '--runtime-version'
  assert f'--accelerator-type={accelerator} {flag}={runtime} ' in result.stdout, result.stdout
  assert f'--project=p --zone={zone} ' in result.stdout, result.stdout
  assert 'tpu-ubuntu2204-base' not in result.stdout and 'us-central2-b' not in result.stdout
  assert result.stderr == ''


def test_a_runtime_or_type_the_accelerator_cannot_take_is_refused_with_the_right_one(tmp_path):
  for script in ('tpu_vm.sh', 'tpu_pod.sh'):
    env = script_env(tmp_path, PROJECT='p', ACCELERATOR_TYPE='v5litepod-8',
                     RUNTIME_VERSION='tpu-ubuntu2204-base')
    refused = run_script(script, '--dry-run', 'create', env=env)
    assert refused.returncode == 1 and refused.stdout == ''
    assert refused.stderr.strip() == (
        "error: RUNTIME_VERSION=tpu-ubuntu2204-base is v4's runtime: v5litepod-8 (v5e) needs "
        'v2-alpha-tpuv5-lite, in one of the zones us-west4-a us-central1-a us-south1-a '
        'us-west1-c; leave RUNTIME_VERSION unset to get it')
  misnamed = run_script('tpu_vm.sh', '--dry-run', 'create',
                        env=script_env(tmp_path, PROJECT='p', ACCELERATOR_TYPE='v5e-8'))
  assert misnamed.returncode == 1
  assert 'gcloud names v5e slices v5litepod-N, e.g. ACCELERATOR_TYPE=v5litepod-8' in misnamed.stderr
  unknown = script_env(tmp_path, PROJECT='p', ACCELERATOR_TYPE='v3-8')
  refused = run_script('tpu_vm.sh', '--dry-run', 'create', env=unknown)
  assert refused.returncode == 1 and 'set RUNTIME_VERSION and ZONE' in refused.stderr
  given = run_script('tpu_vm.sh', '--dry-run', 'create',
                     env={**unknown, 'RUNTIME_VERSION': 'tpu-ubuntu2204-base',
                          'ZONE': 'us-central1-a'})
  assert given.returncode == 0, given.stderr
  assert '--zone=us-central1-a --accelerator-type=v3-8 --version=tpu-ubuntu2204-base' in given.stdout
  # A zone the launcher does not know to offer the type is the user's to choose: kept, with a
  # warning that names the zones that do.
  elsewhere = run_script('tpu_vm.sh', '--dry-run', 'create',
                         env=script_env(tmp_path, PROJECT='p', ACCELERATOR_TYPE='v6e-8',
                                        ZONE='us-central2-b'))
  assert elsewhere.returncode == 0, elsewhere.stderr
  assert '--zone=us-central2-b --accelerator-type=v6e-8 --version=v2-alpha-tpuv6e' in elsewhere.stdout
  assert elsewhere.stderr.startswith(
      'warning: ZONE=us-central2-b is not among the zones known to offer v6e (us-east5-b '
      'us-east5-a us-east1-d us-central1-b europe-west4-a)'), elsewhere.stderr


def test_a_dry_run_names_the_placeholders_it_prints(tmp_path):
  result = run_script('tpu_vm.sh', '--dry-run', 'create', 'data', 'save', env=script_env(tmp_path))
  assert result.returncode == 0, result.stderr
  notes = [line for line in result.stdout.splitlines() if 'laceholder' in line]
  assert notes == ['# Placeholders, to set before a real run (which refuses them): '
                   'PROJECT=my-gcp-project DATA_SOURCE=gs://my-bucket/corpus '
                   'RESULTS_URI=gs://my-bucket/runs/base'], result.stdout
  pod = run_script('tpu_pod.sh', '--dry-run', 'train', env=script_env(tmp_path, PROJECT='p'))
  assert pod.returncode == 0, pod.stderr
  assert ('# Placeholders, to set before a real run (which refuses them): '
          'WORKDIR=gs://my-bucket/runs/base-pod\n') in pod.stdout
  ready = run_script('tpu_vm.sh', '--dry-run', 'create', 'data', 'save',
                     env=script_env(tmp_path, PROJECT='p', BUCKET='gs://b'))
  assert ready.returncode == 0 and 'laceholder' not in ready.stdout


def test_a_bucket_named_like_the_placeholder_is_not_one(tmp_path):
  env = fake_gcloud_env(tmp_path)
  result = run_script('tpu_vm.sh', 'save', env={**env, 'BUCKET': 'gs://my-bucket-2'})
  assert result.returncode == 0, result.stderr
  assert 'gs://my-bucket-2/runs/base' in (tmp_path / 'gcloud.log').read_text()


@pytest.mark.parametrize('script', ['tpu_vm.sh', 'tpu_pod.sh'])
def test_dry_run_goes_anywhere_on_the_line(tmp_path, script):
  env = fake_gcloud_env(tmp_path)
  first = run_script(script, '--dry-run', 'create', 'delete', env=env)
  for args in (('create', '--dry-run', 'delete'), ('create', 'delete', '--dry-run')):
    result = run_script(script, *args, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == first.stdout and 'gcloud compute tpus' in result.stdout
  assert not (tmp_path / 'gcloud.log').exists(), 'a dry run must run no gcloud command'
  wrong = run_script(script, 'create', '--dryrun', env=env)
  assert wrong.returncode == 2 and wrong.stdout == ''
  assert wrong.stderr.startswith(
      'unknown option: --dryrun (the one option is --dry-run, anywhere on the line)')


def test_pod_create_waits_for_active_and_setup_ships_the_source_tree(tmp_path):
  env = fake_gcloud_env(tmp_path, states='WAITING_FOR_RESOURCES PROVISIONING ACTIVE')
  result = run_script('tpu_pod.sh', 'create', 'setup', env=env)
  assert result.returncode == 0, result.stderr
  calls = (tmp_path / 'gcloud.log').read_text().splitlines()
  assert calls[0].startswith('compute tpus queued-resources create electra-pod-request ')
  assert [c.split()[2] for c in calls[1:4]] == ['queued-resources'] * 3
  assert 'PROVISIONING' in result.stderr and 'ACTIVE' in result.stderr
  assert calls[4].startswith('compute tpus tpu-vm scp ') and '--worker=all' in calls[4]
  assert calls[5].startswith('compute tpus tpu-vm ssh electra-pod ') and '--worker=all' in calls[5]

  listing = subprocess.run(['tar', '-tzf', str(tmp_path / 'electra_jax_source.tar.gz')],
                           capture_output=True, text=True, check=True).stdout.split()
  assert {'setup.py', 'launch/remote_setup.sh', 'electra_jax/main.py'} <= set(listing)
  assert not [name for name in listing if name.startswith(('.git/', '.venv/', 'runs/'))]


def test_pod_create_stops_when_the_request_fails(tmp_path):
  env = fake_gcloud_env(tmp_path, states='WAITING_FOR_RESOURCES FAILED')
  result = run_script('tpu_pod.sh', 'create', 'setup', env=env)
  assert result.returncode == 1
  assert 'the queued resource is FAILED' in result.stderr
  assert 'tpu-vm' not in (tmp_path / 'gcloud.log').read_text()  # setup did not run


def test_commands_are_quoted_so_a_shell_gets_the_same_arguments_back():
  tricky = ['plain', 'two words', '--flag=a b', '--glob=data/*', "it's", 'say "hi"', '$HOME',
            'back\\slash', '']
  script = f'''
    source {LAUNCH / 'lib.sh'}
    DRY_RUN=1
    eval "set -- $(print_command "$@")"; printf '<%s>' "$@"; echo
    eval "set -- $(remote_command "$@")"; printf '<%s>' "$@"; echo
  '''
  result = subprocess.run(['bash', '-c', script, 'bash', *tricky], capture_output=True, text=True,
                          check=True)
  expected = ''.join(f'<{a}>' for a in tricky)
  assert result.stdout.splitlines() == [expected, expected]


def test_remote_train_runs_main_in_tmux_and_logs_its_exit_status(tmp_path):
  """remote_train.sh on a fake VM: a home directory whose venv has a `python` that only echoes."""
  if shutil.which('tmux') is None:
    pytest.skip('tmux is not installed')
  home = tmp_path / 'home'
  bin_dir = home / 'electra_venv' / 'bin'
  bin_dir.mkdir(parents=True)
  (bin_dir / 'activate').write_text(f'PATH="{bin_dir}:$PATH"\n')
  (bin_dir / 'python').write_text(
      '#!/bin/sh\necho "fake python got: $* (libtpu: ${LIBTPU_INIT_ARGS:-none}; '
      'log level: ${TPU_STDERR_LOG_LEVEL:-none})"\nexit 3\n')
  (bin_dir / 'python').chmod(0o755)
  env = {'HOME': str(home), 'PATH': os.environ['PATH'], 'TMUX_TMPDIR': str(tmp_path)}
  script = str(LAUNCH / 'remote_train.sh')
  log = home / 'runs' / 'x' / 'train.log'

  foreground = subprocess.run(['bash', script, 'run', 'runs/x/train.log', '--workdir=runs/x',
                               '--config.data.train_files=data/*'], env=env, capture_output=True,
                              text=True, timeout=30, check=False)
  assert foreground.returncode == 3
  assert ('fake python got: -m electra_jax.main --workdir=runs/x --config.data.train_files=data/* '
          '(libtpu: none; log level: none)') in log.read_text()
  assert 'exited with status 3' in log.read_text()

  log.unlink()
  try:
    started = subprocess.run(['bash', script, 'start', 'runs/x/train.log', '--workdir=runs/x'],
                             env=env, capture_output=True, text=True, timeout=30, check=False)
    assert started.returncode == 0, started.stderr
    assert "in tmux session 'electra'" in started.stdout
    deadline = time.monotonic() + 20
    while not (log.exists() and 'exited with status 3' in log.read_text()):
      assert time.monotonic() < deadline, 'the tmux session did not run the training command'
      time.sleep(0.2)
    # Started again with libtpu settings while a tmux server runs (it keeps the environment it
    # began with): they reach the training process.
    log.unlink()
    while subprocess.run(['tmux', 'has-session', '-t', 'electra'], env=env, capture_output=True,
                         check=False).returncode == 0:  # the first session is ending
      assert time.monotonic() < deadline + 20, 'the first tmux session did not end'
      time.sleep(0.2)
    subprocess.run(['tmux', 'new-session', '-d', '-s', 'other', 'sleep 60'], env=env, check=True)
    flag = '--xla_tpu_spmd_rng_bit_generator_unsafe=true'
    given = {'LIBTPU_INIT_ARGS': flag, 'TPU_STDERR_LOG_LEVEL': '0',
             'ELECTRA_TRAIN_ENV': 'LIBTPU_INIT_ARGS TPU_STDERR_LOG_LEVEL'}
    started = subprocess.run(['bash', script, 'start', 'runs/x/train.log', '--workdir=runs/x'],
                             env={**env, **given}, capture_output=True, text=True, timeout=30,
                             check=False)
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 20
    while not (log.exists() and 'exited with status 3' in log.read_text()):
      assert time.monotonic() < deadline, 'the tmux session did not run the training command'
      time.sleep(0.2)
    assert ('fake python got: -m electra_jax.main --workdir=runs/x '
            f'(libtpu: {flag}; log level: 0)') in log.read_text()
    assert f'LIBTPU_INIT_ARGS={flag} TPU_STDERR_LOG_LEVEL=0 python -m electra_jax.main' \
        in log.read_text()
  finally:
    subprocess.run(['tmux', 'kill-server'], env=env, capture_output=True, check=False)


def test_remote_setup_installs_the_jax_build_jax_extra_names(tmp_path):
  """remote_setup.sh on a fake VM: its venv's `python` only records what it is asked to do."""
  home = tmp_path / 'home'
  bin_dir = home / 'electra_venv' / 'bin'
  bin_dir.mkdir(parents=True)
  calls = tmp_path / 'python.log'
  (bin_dir / 'python').write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
  (bin_dir / 'python').chmod(0o755)
  path_dir = tmp_path / 'path'  # a Python that can make a venv, so no apt-get is tried
  path_dir.mkdir()
  (path_dir / 'python3.13').write_text('#!/bin/sh\nexit 0\n')
  (path_dir / 'python3.13').chmod(0o755)
  env = {'HOME': str(home), 'PATH': f'{path_dir}:{os.environ["PATH"]}'}
  script = str(LAUNCH / 'remote_setup.sh')
  for extra, package in ((None, 'jax[tpu]'), ('cuda12', 'jax[cuda12]'), ('cpu', 'jax[cpu]')):
    calls.unlink(missing_ok=True)
    given = {'JAX_EXTRA': extra} if extra else {}
    result = subprocess.run(['bash', script], env={**env, **given}, capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    lines = calls.read_text().splitlines()
    assert f'-m pip install --quiet --upgrade {package}' in lines, lines
    assert f'-m pip install --quiet -e {REPO}[gcs]' in lines, lines  # the checkout it is in
    assert f'and {package}' in result.stdout
  calls.unlink()
  refused = subprocess.run(['bash', script], env={**env, 'JAX_EXTRA': 'cuda'}, capture_output=True,
                           text=True, timeout=30, check=False)
  assert refused.returncode == 1 and not calls.exists()
  assert refused.stderr.strip() == ('error: JAX_EXTRA=cuda: use tpu (a TPU VM), cuda12 or cuda13 '
                                    '(NVIDIA GPUs) or cpu')


def test_notebook_is_valid_nbformat_4():
  nbformat = pytest.importorskip('nbformat')
  notebook = nbformat.read(str(NOTEBOOK), as_version=nbformat.NO_CONVERT)
  assert notebook.nbformat == 4
  nbformat.validate(notebook)
  assert all(not cell.get('outputs') for cell in notebook.cells if cell.cell_type == 'code'), \
      'commit the notebook without outputs'


@pytest.mark.slow
def test_notebook_runs_top_to_bottom_on_cpu(tmp_path, wikitext):
  """Installs nothing (electra_jax is installed), pretrains tiny for 30 steps, exports, fills a mask."""
  for module in ('nbconvert', 'ipykernel', 'torch', 'transformers'):
    pytest.importorskip(module)
  env = dict(os.environ)
  env.update({
      'JAX_PLATFORMS': 'cpu',
      'JAX_NUM_CPU_DEVICES': '1',
      'ELECTRA_SOURCE': str(REPO),
      'ELECTRA_RUNTIME': 'cpu',
      'ELECTRA_INSTALL': 'auto',
      'ELECTRA_TRAIN_FILE': str(wikitext / 'wiki.valid.raw'),
      'ELECTRA_EVAL_FILE': str(wikitext / 'wiki.test.raw'),
      'ELECTRA_STEPS': '30',
      'ELECTRA_FLAGS': '--config.batch_size=16 --config.max_seq_length=64 '
                       '--config.model.vocab_size=1000 --config.eval_steps=1',
      'ELECTRA_WORKDIR': str(tmp_path / 'run'),
      # The kernel is this environment's python3: no user-installed kernel spec may shadow it.
      'JUPYTER_DATA_DIR': str(tmp_path / 'jupyter'),
      'JUPYTER_PATH': os.path.join(sys.prefix, 'share', 'jupyter'),
  })
  result = subprocess.run(
      [sys.executable, '-m', 'nbconvert', '--to', 'notebook', '--execute',
       '--ExecutePreprocessor.timeout=600', f'--output-dir={tmp_path}', str(NOTEBOOK)],
      env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False)
  assert result.returncode == 0, result.stderr[-5000:]

  executed = json.loads((tmp_path / NOTEBOOK.name).read_text())
  text = '\n'.join(''.join(output.get('text', ''))
                   for cell in executed['cells'] if cell['cell_type'] == 'code'
                   for output in cell.get('outputs', []))
  assert 'runtime: cpu' in text
  assert 'step 30/30' in text
  assert 'eval at step 0:' in text
  assert f'exported step 30 of {tmp_path / "run"}' in text
  assert 'The game was released in [MASK] .' in text
  guesses = [line for line in text.splitlines() if line.startswith('  0.') or line.startswith('  1.')]
  assert len(guesses) >= 5, text[-3000:]
  assert (tmp_path / 'run' / 'hf' / 'generator' / 'config.json').exists()
