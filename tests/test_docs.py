"""The front door stays open: README.md and docs/*.md link to what exists, and run what exists.

Every relative link resolves to a file, every #anchor to a heading of its target (GitHub's slug
rules), the README stays short, and every command the pages show (`python -m electra_jax.<module>`,
`python benchmarks/<script>.py`) still starts: run once with --help in a subprocess.
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
PAGES = [ROOT / 'README.md'] + sorted((ROOT / 'docs').glob('*.md'))
README_MAX_LINES = 220

_FENCE = re.compile(r'^\s*(```|~~~)')
_HEADING = re.compile(r'^(#{1,6})\s+(.+?)\s*#*\s*$')
_CODE_SPAN = re.compile(r'`[^`\n]*`')
_LINK = re.compile(r'!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
_MODULE = re.compile(r'\bpython3? -m (electra_jax(?:\.[A-Za-z_]\w*)*)')
_SCRIPT = re.compile(r'\bpython3? (benchmarks/[\w/]+\.py)\b')


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


def commands():
  """The distinct commands the pages show, each as the argv that asks it for --help."""
  found = set()
  for page in PAGES:
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
                         'python -m electra_jax.data.benchmark, not python -m pytest') == [
                             'electra_jax.prepare', 'electra_jax.data.benchmark']
  assert _SCRIPT.findall('python benchmarks/compare.py --size=small') == ['benchmarks/compare.py']


# ------------------------------------------------------------------- the pages


def test_docs_exist_and_every_link_and_anchor_resolves():
  assert (ROOT / 'docs').is_dir() and len(PAGES) > 1
  problems = []
  for page in PAGES:
    problems += broken_links(page.read_text(encoding='utf-8'), page)
  assert not problems, 'broken links:\n' + '\n'.join(problems)


def test_readme_is_short_and_keeps_the_install_and_test_commands():
  text = (ROOT / 'README.md').read_text(encoding='utf-8')
  lines = text.rstrip('\n').split('\n')
  assert len(lines) <= README_MAX_LINES, f'README.md has {len(lines)} lines (at most {README_MAX_LINES})'
  # .ci/run runs these two; the README is where a user reads them.
  assert "pip install -e '.[test]'" in text
  assert '```bash\npython -m pytest -q\n```' in text


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
  missing = [p.name for p in PAGES[1:] if f'docs/{p.name}' not in targets]
  assert not missing, f'docs pages the README does not link: {missing}'


COMMANDS = commands()


def test_the_pages_show_the_main_commands():
  shown = {name for _, name in COMMANDS}
  assert {'electra_jax.main', 'electra_jax.prepare', 'electra_jax.finetune',
          'benchmarks/transfer_study.py'} <= shown, shown


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
