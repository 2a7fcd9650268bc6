"""The docs' shape: a short README whose test command CI runs, current
figures in docs/PERFORMANCE.md, no dated headings, and the files a user
looks for (CHANGELOG.md, the generated reference, benchmarks/README.md).
Cheap: it reads files only."""

import re

import pytest

from conftest import REPO

_DATE = re.compile(r'\b(19|20)\d\d-\d\d(-\d\d)?\b')
_FENCE = re.compile(r'^(```|~~~)')


def _prose(path):
  """The lines of `path` outside fenced code blocks."""
  found, fenced = [], False
  for line in path.read_text(encoding='utf-8').splitlines():
    if _FENCE.match(line):
      fenced = not fenced
    elif not fenced:
      found.append(line)
  return found


def _headings(path):
  """The Markdown headings of `path`, outside fenced code blocks."""
  return [line for line in _prose(path) if line.startswith('#')]


def _lines(path):
  return len(path.read_text(encoding='utf-8').splitlines())


@pytest.mark.fast
def test_readme_and_performance_are_short():
  assert _lines(REPO / 'README.md') <= 250
  assert _lines(REPO / 'docs' / 'PERFORMANCE.md') <= 400


@pytest.mark.fast
def test_the_readme_starts_with_the_two_commands_ci_runs():
  readme = (REPO / 'README.md').read_text(encoding='utf-8')
  first_block = readme.split('```sh\n', 1)[1].split('```', 1)[0]
  assert [line.split()[:2] for line in first_block.splitlines()] == [
    ['make', 'run'],
    ['make', 'test'],
  ]
  assert 'make test' in (REPO / '.ci' / 'run').read_text()


@pytest.mark.fast
def test_no_heading_in_the_readme_or_docs_carries_a_date():
  pages = [REPO / 'README.md', *sorted((REPO / 'docs').rglob('*.md'))]
  dated = [
    f'{page.relative_to(REPO)}: {heading}'
    for page in pages
    for heading in _headings(page)
    if _DATE.search(heading)
  ]
  assert not dated, dated


@pytest.mark.fast
def test_the_files_a_user_looks_for_exist():
  for path in (
    'CHANGELOG.md',
    'docs/reference/flags.md',
    'docs/reference/metrics.md',
    'benchmarks/README.md',
    'tools/README.md',
  ):
    assert (REPO / path).is_file(), path
  assert re.search(r"version='([^']+)'", (REPO / 'setup.py').read_text()).group(
    1
  ) in (REPO / 'CHANGELOG.md').read_text(encoding='utf-8')


@pytest.mark.fast
def test_every_relative_link_in_the_readme_and_docs_resolves():
  pages = [
    REPO / 'README.md',
    REPO / 'CHANGELOG.md',
    REPO / 'benchmarks' / 'README.md',
    REPO / 'tools' / 'README.md',
    *sorted((REPO / 'docs').rglob('*.md')),
  ]
  broken = []
  for page in pages:
    text = '\n'.join(_prose(page))
    for target in re.findall(r'\]\(([^)\s]+)\)', text):
      if re.match(r'[a-z]+:', target) or target.startswith('#'):
        continue
      path = target.split('#', 1)[0]
      if not (page.parent / path).exists():
        broken.append(f'{page.relative_to(REPO)}: {target}')
  assert not broken, broken
