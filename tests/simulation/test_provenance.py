"""The record of a run's code: the module paths it resolves are
`os.path.realpath`'s, however the folders and files are linked."""

import os
import sys

import pytest

from tff_algos.simulation import provenance

pytestmark = pytest.mark.fast  # Few tests, each cheap: all in the fast set.


def test_every_loaded_modules_path_resolves_as_realpath_does():
  realpath = provenance._realpath_by_parts()
  paths = [
    m.__file__
    for m in list(sys.modules.values())
    if isinstance(getattr(m, '__file__', None), str)
  ]
  assert len(paths) > 1000
  assert [realpath(p) for p in paths] == [os.path.realpath(p) for p in paths]


def test_linked_folders_and_files_resolve_as_realpath_does(
  tmp_path, monkeypatch
):
  real = tmp_path / 'real' / 'pkg'
  real.mkdir(parents=True)
  (real / 'mod.py').write_text('')
  (tmp_path / 'elsewhere.py').write_text('')
  (tmp_path / 'linked').symlink_to(tmp_path / 'real')  # A folder.
  (real / 'file_link.py').symlink_to(tmp_path / 'elsewhere.py')  # A file.
  (real / 'relative.py').symlink_to('../../elsewhere.py')
  (tmp_path / 'chain').symlink_to('linked')  # A link to a link.
  (tmp_path / 'loop').symlink_to('loop')
  (tmp_path / 'deep').symlink_to(real)  # '..' after it is real/, not tmp/.
  (tmp_path / 'real' / 'up.py').write_text('')
  monkeypatch.chdir(tmp_path)
  paths = [
    'linked/pkg/mod.py',
    'chain/pkg/file_link.py',
    'linked/pkg/relative.py',
    'chain/pkg/../pkg/mod.py',
    str(tmp_path / 'linked' / 'pkg' / 'missing.py'),
    'loop/x.py',
    '/',
    str(real / 'mod.py'),
    'deep/../up.py',
    'deep/./mod.py',
    'linked//pkg/mod.py',
    str(tmp_path / 'deep') + '/',
  ]
  realpath = provenance._realpath_by_parts()
  for path in paths:
    assert realpath(path) == os.path.realpath(path), path
  assert realpath('linked/pkg/file_link.py') == str(tmp_path / 'elsewhere.py')
