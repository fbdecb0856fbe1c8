"""The front door stays open: README.md, docs/*.md, CHANGELOG.md and the study's report link to
what exists, and run what exists.

Every relative link resolves to a file, every #anchor to a heading of its target (GitHub's slug
rules), every path to a Python file that the README and docs/ name exists, and every command the
pages show (`python -m electra_jax.<module>`, `python -m research.<study>[.<script>]`,
`python benchmarks/<script>.py`) still starts: run once with --help in a subprocess. The README
stays short (150 lines, 1,500 words) and docs/ stays a manual (2,000 lines, no dated section).
"""

import collections
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / 'docs').glob('*.md'))
STUDY_REPORT = ROOT / 'research' / 'transfer_study' / 'README.md'
CHANGELOG = ROOT / 'CHANGELOG.md'
# Pages whose links must resolve.
PAGES = [ROOT / 'README.md'] + DOCS + [CHANGELOG] + ([STUDY_REPORT] if STUDY_REPORT.exists() else [])
# Pages whose commands must start. The changelog names old commands on purpose.
COMMAND_PAGES = [page for page in PAGES if page != CHANGELOG]
README_MAX_LINES = 150
README_MAX_WORDS = 1500
DOCS_MAX_LINES = 2000

_FENCE = re.compile(r'^\s*(```|~~~)')
_HEADING = re.compile(r'^(#{1,6})\s+(.+?)\s*#*\s*$')
_CODE_SPAN = re.compile(r'`[^`\n]*`')
_LINK = re.compile(r'!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
_MODULE = re.compile(r'\bpython3? -m ((?:electra_jax|research)(?:\.[A-Za-z_]\w*)*)')
_SCRIPT = re.compile(r'\bpython3? (benchmarks/[\w/]+\.py)\b')
# A path to a Python file of this repository: from its root, or inside the electra_jax package.
_TOP_FOLDERS = ('electra_jax', 'benchmarks', 'configs', 'tests', 'research', 'launch',
                'common', 'model', 'objective', 'data', 'training', 'hf', 'finetune')
_PY_PATH = re.compile(r'(?<![\w/.-])((?:%s)/(?:[\w-]+/)*[\w-]+\.py)\b' % '|'.join(_TOP_FOLDERS))
_DATE = re.compile(r'20\d\d-\d\d-\d\d')


def prose_lines(text):
  """(line number, line) outside fenced code blocks."""
  in_fence = False
  for number, line in enumerate(text.split('\n'), 1):
    if _FENCE.match(line):
      in_fence = not in_fence
      continue
    if not in_fence:
      yield number, line


def slug(heading):
  """GitHub's anchor for a heading: lowercase, punctuation but hyphens and spaces dropped,
  spaces to hyphens (letters, digits and underscores are word characters and stay)."""
  text = _CODE_SPAN.sub(lambda m: m.group(0)[1:-1], heading.strip().lower())
  return re.sub(r'[^\w\- ]', '', text).replace(' ', '-')


def anchors(text):
  """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
  seen = collections.Counter()
  found = set()
  for _, line in prose_lines(text):
    match = _HEADING.match(line)
    if match:
      base = slug(match.group(2))
      found.add(base if not seen[base] else f'{base}-{seen[base]}')
      seen[base] += 1
  return found


def links(text):
  """(line number, target) of every Markdown link and image outside code."""
  for number, line in prose_lines(text):
    for match in _LINK.finditer(_CODE_SPAN.sub('``', line)):
      yield number, match.group(1)


def broken_links(text, page, read=lambda p: p.read_text(encoding='utf-8')):
  """Messages for the links of `text` (the page at `page`) that do not resolve."""
  problems = []
  for number, target in links(text):
    if re.match(r'^[a-z][a-z0-9+.-]*:', target):   # http:, https:, mailto:
      continue
    path, _, anchor = target.partition('#')
    where = f'{page.name}:{number}: {target}'
    if path:
      resolved = (page.parent / path).resolve()
      if not resolved.exists():
        problems.append(f'{where}: no file {resolved}')
        continue
      target_text = read(resolved) if resolved.suffix == '.md' else None
    else:
      target_text = text
    if anchor:
      if target_text is None:
        problems.append(f'{where}: an anchor into a file that is not Markdown')
      elif anchor not in anchors(target_text):
        problems.append(f'{where}: no heading with anchor #{anchor} in {path or page.name}')
  return problems


def missing_python_files(text, root=ROOT):
  """The paths to Python files that `text` names and that exist neither from the repository's
  root nor inside the electra_jax package (`training/train.py` is electra_jax/training/train.py).
  A path may start at a checkout named electra_jax, as on a TPU VM (`electra_jax/configs/base.py`)."""
  def exists(path):
    checkout = path[len('electra_jax/'):] if path.startswith('electra_jax/') else path
    return any((root / p).is_file() for p in (path, f'electra_jax/{path}', checkout))
  return sorted({path for path in _PY_PATH.findall(text) if not exists(path)})


def dated_headings(text):
  """(line number, heading) of every heading that carries a date: a manual has no dated section."""
  return [(number, line) for number, line in prose_lines(text)
          if _HEADING.match(line) and _DATE.search(line)]


def commands():
  """The distinct commands the pages show, each as the argv that asks it for --help."""
  found = set()
  for page in COMMAND_PAGES:
    text = page.read_text(encoding='utf-8')
    found.update(('-m', module) for module in _MODULE.findall(text))
    found.update(('script', script) for script in _SCRIPT.findall(text))
  return sorted(found)


# ------------------------------------------------------------------- the checker itself


def test_slug_follows_githubs_rules():
  assert slug("The paper's ablations (`objective=electra_15`, `replace_mlm`, `all_tokens_mlm`)") == (
      'the-papers-ablations-objectiveelectra_15-replace_mlm-all_tokens_mlm')
  assert slug('Hugging Face: export and import') == 'hugging-face-export-and-import'
  assert slug('Measured: SQuAD 1.1') == 'measured-squad-11'
  assert slug('Several processes, preemption, memory') == 'several-processes-preemption-memory'
  assert anchors('# A\n## A\n```\n# Not a heading\n```\n') == {'a', 'a-1'}


def test_the_link_checker_finds_broken_links(tmp_path):
  (tmp_path / 'other.md').write_text('# Other page\n\n## A section: here\n')
  (tmp_path / 'plot.png').write_bytes(b'')
  page = tmp_path / 'page.md'
  good = ('# Page\n\nSee [other](other.md), [its section](other.md#a-section-here), [up](#page),\n'
          '![plot](plot.png) and [the web](https://example.com/x#y).\n'
          '```\n[inside a code block](missing.md)\n```\nand `[in code](missing.md)`.\n')
  assert broken_links(good, page) == []
  bad = ('# Page\n\n[gone](missing.md) [no such section](other.md#nowhere)\n'
         '[no anchor here](#elsewhere) [not markdown](plot.png#x)\n')
  problems = broken_links(bad, page)
  assert len(problems) == 4, problems
  assert 'page.md:3: missing.md: no file' in problems[0]
  assert 'no heading with anchor #nowhere in other.md' in problems[1]
  assert 'page.md:4: #elsewhere' in problems[2]
  assert 'not Markdown' in problems[3]


def test_commands_are_found_in_prose_and_code():
  assert _MODULE.findall('run `python -m electra_jax.prepare --verify=D` or\n'
                         'python -m electra_jax.compile --topology=v4-8, not python -m pytest') == [
                             'electra_jax.prepare', 'electra_jax.compile']
  assert _MODULE.findall('python -m research.transfer_study --out=runs/transfer and '
                         'python -m research.transfer_study.linear_probe --help') == [
                             'research.transfer_study', 'research.transfer_study.linear_probe']
  assert _SCRIPT.findall('python benchmarks/compare.py --size=small') == ['benchmarks/compare.py']


def test_the_path_checker_finds_python_files_that_are_not_there(tmp_path):
  (tmp_path / 'electra_jax' / 'training').mkdir(parents=True)
  (tmp_path / 'electra_jax' / 'training' / 'train.py').write_text('')
  (tmp_path / 'benchmarks').mkdir()
  (tmp_path / 'benchmarks' / 'compare.py').write_text('')
  text = ('`training/train.py`, `electra_jax/training/train.py`, python benchmarks/compare.py,\n'
          '`electra_jax/core/model.py`, `training/gone.py` and google-research/electra/finetune/x.py')
  assert missing_python_files(text, tmp_path) == ['electra_jax/core/model.py', 'training/gone.py']


def test_dated_headings_are_found_outside_code_only():
  text = ('# Page\n## Results (2026-11-26)\nmeasured 2026-11-26 in a paragraph\n'
          '```\n# 2026-11-26 in a code block\n```\n### Later\n')
  assert dated_headings(text) == [(2, '## Results (2026-11-26)')]


# ------------------------------------------------------------------- the pages


def test_docs_exist_and_every_link_and_anchor_resolves():
  assert (ROOT / 'docs').is_dir() and len(PAGES) > 1
  problems = []
  for page in PAGES:
    problems += broken_links(page.read_text(encoding='utf-8'), page)
  assert not problems, 'broken links:\n' + '\n'.join(problems)


def test_every_python_file_the_readme_and_docs_name_exists():
  problems = []
  for page in [ROOT / 'README.md'] + DOCS:
    problems += [f'{page.name}: {path}' for path in
                 missing_python_files(page.read_text(encoding='utf-8'))]
  assert not problems, 'paths to files that do not exist:\n' + '\n'.join(problems)


def test_readme_is_short_and_keeps_the_install_and_test_commands():
  text = (ROOT / 'README.md').read_text(encoding='utf-8')
  lines = text.rstrip('\n').split('\n')
  assert len(lines) <= README_MAX_LINES, f'README.md has {len(lines)} lines (at most {README_MAX_LINES})'
  words = len(text.split())
  assert words <= README_MAX_WORDS, f'README.md has {words} words (at most {README_MAX_WORDS})'
  # .ci/run runs these two; the README is where a user reads them.
  assert "pip install -e '.[test]'" in text
  assert '```bash\npython -m pytest -q\n```' in text


def test_docs_are_a_manual_of_at_most_2000_lines_without_dated_sections():
  lines = {page.name: len(page.read_text(encoding='utf-8').rstrip('\n').split('\n')) for page in DOCS}
  assert sum(lines.values()) <= DOCS_MAX_LINES, (
      f'docs/ has {sum(lines.values())} lines (at most {DOCS_MAX_LINES}): {lines}')
  dated = [f'{page.name}:{number}: {line}' for page in DOCS
           for number, line in dated_headings(page.read_text(encoding='utf-8'))]
  assert not dated, 'dated sections in docs/ (a log belongs to its study):\n' + '\n'.join(dated)


def test_the_suite_starts_a_worker_per_test_file_at_most_and_none_for_one():
  from conftest import pytest_xdist_auto_num_workers as workers_for  # pylint: disable=g-import-not-at-top
  workers = lambda *args: workers_for(types.SimpleNamespace(args=[str(a) for a in args]))
  tests = ROOT / 'tests'
  whole = workers(tests)  # what the README's command gets: as the machine allows
  assert whole == 0 or 2 <= whole <= 4
  assert workers(tests / 'test_docs.py') == 0
  assert workers(f"{tests / 'test_docs.py'}::test_slug_follows_githubs_rules",
                 f"{tests / 'test_docs.py'}::test_commands_are_found_in_prose_and_code") == 0
  two = workers(tests / 'test_docs.py', tests / 'test_run_lock.py')
  assert two == (2 if whole else 0)
  assert workers(tests, tests / 'test_docs.py') == whole  # a folder: its files are not counted


def test_every_page_is_linked_from_the_readme():
  text = (ROOT / 'README.md').read_text(encoding='utf-8')
  targets = {target.partition('#')[0] for _, target in links(text)}
  missing = [str(p.relative_to(ROOT)) for p in PAGES[1:] if str(p.relative_to(ROOT)) not in targets]
  assert not missing, f'pages the README does not link: {missing}'


COMMANDS = commands()


def test_the_pages_show_the_main_commands():
  shown = {name for _, name in COMMANDS}
  assert {'electra_jax.main', 'electra_jax.prepare', 'electra_jax.finetune', 'electra_jax.export',
          'electra_jax.import_hf', 'electra_jax.compile', 'electra_jax.benchmark',
          'research.transfer_study', 'benchmarks/compare.py'} <= shown, shown


@pytest.mark.parametrize('kind,name', COMMANDS, ids=[name for _, name in COMMANDS])
def test_every_command_shown_starts(kind, name):
  argv = [sys.executable] + (['-m', name] if kind == '-m' else [name]) + ['--help']
  env = dict(os.environ, JAX_PLATFORMS='cpu',
             PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')])))
  result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  output = result.stdout + result.stderr
  assert 'Traceback' not in output and 'No module named' not in output and (
      "can't open file" not in output), f'{" ".join(argv[1:])} failed:\n{output[-3000:]}'
  # argparse exits 0 on --help; absl prints its help and exits 1, and finetune_summary, which
  # takes only directories, answers with its usage line.
  assert result.returncode == 0 or re.search(r'usage|--helpfull', output, re.IGNORECASE), (
      f'{" ".join(argv[1:])} exited {result.returncode} without printing its usage:\n'
      f'{output[-3000:]}')
