"""What the command lines share: absl flags, one error style, --help, flag
files and users' modules. Imports no TensorFlow.

A run's flags are its settings' declarations (`simulation.config.SETTINGS`)
and the algorithms' hyper-parameters (`registry.HyperParameter`); each
program adds its own `Flag`s. They are defined into a fresh
`absl.flags.FlagValues` per parse (`flag_values`), so a sweep parses each
run's flags without global state. `config_from_flags` turns parsed flags
into a `Config`; a flag that was not given stays None there ("the
algorithm's default"). Every entry point reports bad input as one
line, `PROGRAM: error: …`, and exit code 2 (`fail`): the help is a flag
away.
"""

import contextlib
import dataclasses
import io
import os
import sys
import textwrap
from typing import NoReturn

from absl import flags

import tasks
from tff_algos import user_modules
from tff_algos.algorithms import registry
from tff_algos.simulation import config as config_lib


class UsageError(Exception):
  """Bad input: one line on stderr, exit code 2."""


def fail(program: str, message, code: int = 2) -> NoReturn:
  """One line on stderr, `PROGRAM: error: message` (exit code 2: bad
  input) or `PROGRAM: message` (a run that stopped), then exit `code`."""
  text = ' '.join(str(message).split())  # One line, whatever it holds.
  prefix = 'error: ' if code == 2 else ''
  print(f'{program}: {prefix}{text}', file=sys.stderr, flush=True)
  sys.exit(code)


def exit_on_ctrl_c(program: str, main, *args):
  """`main(*args)`'s exit, Ctrl-C being one line and exit code 130 (a
  command's import of TensorFlow, before any run of its own)."""
  try:
    return main(*args)
  except KeyboardInterrupt:
    fail(program, 'interrupted', code=130)


# ----------------------------------------------------------------- flags
@dataclasses.dataclass(frozen=True)
class Flag:
  define: str  # the absl DEFINE_ function's name
  name: str
  default: object
  help: str
  args: tuple = ()  # e.g. an enum's values


_DEFINE = {
  bool: 'DEFINE_bool',
  int: 'DEFINE_integer',
  float: 'DEFINE_float',
  str: 'DEFINE_string',
  list: 'DEFINE_multi_string',
}


def _flag(setting: config_lib.Setting) -> Flag:
  """The flag of a run setting's declaration."""
  define = _DEFINE[setting.kind] if setting.multi else 'DEFINE_list'
  return Flag(
    'DEFINE_enum' if setting.choices else define,
    setting.name,
    None if setting.unset else setting.default,
    config_lib.help_text(setting),
    (list(setting.choices),) if setting.choices else (),
  )


def _groups():
  """The flags of every --help section, in order (`config.flags()`, built
  on first use: the algorithms' defaults and hyper-parameters come from
  the registry). UsageError for a hyper-parameter named as another
  flag."""
  try:
    settings = config_lib.flags()
  except config_lib.ConfigError as e:
    raise UsageError(str(e)) from None
  groups = {}
  for setting in settings:
    groups.setdefault(setting.section, []).append(_flag(setting))
  return groups


def flag_values(groups, extra=()) -> flags.FlagValues:
  """A fresh `FlagValues` holding the flags of `groups` (names of
  `_groups()`) and `extra` (`Flag`s of the program's own)."""
  holder = flags.FlagValues()
  specs = _groups()
  for flag in [f for g in groups for f in specs[g]] + list(extra):
    _define(holder, flag)
  return holder


def _define(holder, flag):
  define = getattr(flags, flag.define)
  if flag.define == 'DEFINE_enum':
    define(flag.name, flag.default, flag.args[0], flag.help, flag_values=holder)
  else:
    define(flag.name, flag.default, flag.help, flag_values=holder)


def usage(program, description, groups, extra=(), arguments=''):
  """The help text: what the program does, the tasks and algorithms (for a
  program with their flags), then the flags by group."""
  width = 79
  lines = [
    f'usage: {program} [--flag=value ...]{arguments}',
    '',
    textwrap.fill(description, width),
  ]

  def item(name, text):
    return textwrap.wrap(
      f'{name:24s}{text}',
      width,
      initial_indent='  ',
      subsequent_indent=' ' * 26,
    )

  if 'data' in groups:
    lines += ['', 'tasks (--task):']
    for name, (_, text) in tasks.CATALOG.items():
      lines += item(name, text)
    for name, text in tasks.registered().items():
      lines += item(name, text)
  if 'algorithm' in groups:
    lines += ['', 'algorithms (--algo):']
    for name in registry.names():
      entry = registry.get(name)
      lines += item(name, f'{entry.summary} ({entry.paper})')
  specs = _groups()
  sections = [(g, specs[g]) for g in groups]
  if extra:
    sections.append(('program', list(extra)))
  for group, group_flags in sections:
    lines += ['', f'{group} flags:' if groups else 'flags:']
    for flag in group_flags:
      default = (
        f' [default: {flag.default}]'
        if flag.default not in (None, '', [])
        else ''
      )
      lines.append(f'  --{flag.name}')
      lines += textwrap.wrap(
        flag.help + default,
        width,
        initial_indent=' ' * 6,
        subsequent_indent=' ' * 6,
      )
  lines += [''] + textwrap.wrap(
    'Flags can also come from a file: --flagfile=FILE (configs/ holds the '
    "papers' experiments); flags after it override it. --helpfull lists "
    "absl's own flags too.",
    width,
  )
  return '\n'.join(lines)


def wants_help(argv):
  return any(a in ('-h', '--help', '-help', '--helpshort') for a in argv[1:])


def parse(holder: flags.FlagValues, args, positional: bool = False):
  """Parses `args` (flag files already expanded) into `holder`; returns
  the arguments that are not flags (with `positional`; else they are a
  UsageError, as a bad flag is)."""
  try:
    rest = holder(['program', *args])[1:]
  except flags.Error as e:
    raise UsageError(str(e).splitlines()[0]) from None
  if rest and not positional:
    raise UsageError(f'unexpected arguments: {" ".join(rest)}')
  return rest


# ------------------------------------------------------------ flag files
def expand_flagfiles(args) -> tuple[list[str], list[str]]:
  """`args` with every --flagfile=FILE replaced by its flags, by absl's own
  expansion (recursively; blank lines and # or // comments skipped; each
  line one flag, taken whole: `--variant=A: --mu=1`), and the names of the
  flag files given. UsageError (one line, naming the file) for a file that
  cannot be opened (missing, a folder), is not UTF-8 or includes itself
  (absl only warns of that), or a line that is not a flag."""
  names = []
  for arg in args:
    if arg in ('--flagfile', '-flagfile'):
      raise UsageError('write --flagfile=FILE')
    if arg.startswith('--flagfile='):
      names.append(os.path.splitext(os.path.basename(arg.split('=', 1)[1]))[0])
  if not names:
    return list(args), []
  warnings = io.StringIO()
  try:
    with contextlib.redirect_stderr(warnings):
      expanded = flags.FlagValues().read_flags_from_files(list(args))
  except flags.CantOpenFlagFileError as e:
    cause = e.__context__
    if isinstance(cause, OSError):
      raise UsageError(
        f'--flagfile={cause.filename}: {cause.strerror}'
      ) from None
    raise UsageError(str(e)) from None
  except UnicodeDecodeError as e:
    raise UsageError(
      f'a --flagfile is not UTF-8 text (byte {e.start}: {" ".join(args)})'
    ) from None
  if 'circular flagfile' in warnings.getvalue():
    path = warnings.getvalue().rsplit(':', 1)[-1].strip()
    raise UsageError(f'--flagfile={path} includes itself')
  typed = set(args)
  for line in expanded:
    if line not in typed and not line.startswith('-'):
      raise UsageError(
        f'a --flagfile holds {line!r}: expected one --flag=value per line'
      )
  return expanded, names


# ------------------------------------------------------- users' modules
def import_modules(specs) -> tuple[str, ...]:
  """`user_modules.import_modules`; UsageError (one line) for a module that
  cannot be imported."""
  try:
    return user_modules.import_modules(specs)
  except user_modules.ImportFailed as e:
    raise UsageError(str(e)) from None


imports_in = user_modules.imports_in


# --------------------------------------------------------- the settings
def _hparams(holder):
  """The hyper-parameters given: their flags and --hparam NAME=VALUE
  (UsageError for one given both ways)."""
  values = {
    name: holder[name].value
    for name in registry.hyperparameters()
    if name in holder and holder[name].value is not None
  }
  flagged = set(values)
  for item in holder.hparam:
    name, sep, value = item.partition('=')
    name = name.strip()
    try:
      number = float(value)
    except ValueError:
      sep = ''
    if not sep or not name:
      raise UsageError(f'--hparam={item!r}: expected NAME=NUMBER')
    if name in flagged:
      raise UsageError(f'give --{name} or --hparam={name}=..., not both')
    values[name] = number
  return values


def config_from_flags(holder, imports=(), check=True) -> config_lib.Config:
  """The Config of the parsed flags (`config.from_flags`); UsageError for
  a bad combination (with `check`: a sweep's common flags are checked as
  each run's)."""
  try:
    config = config_lib.from_flags(
      {name: holder[name].value for name in holder}, _hparams(holder), imports
    )
    if not tasks.is_known(config.task):
      raise UsageError(
        f'unknown --task={config.task!r}; known: '
        f'{", ".join(tasks.task_names())}'
      )
    if check:
      config_lib.resolve(config)
  except config_lib.ConfigError as e:
    raise UsageError(str(e)) from None
  return config


def task_options(holder):
  """The data flags a task loader takes as options: the data section's
  settings that are not recorded as a run setting (`group` None)."""
  return {
    s.name: holder[s.name].value
    for s in config_lib.SETTINGS
    if (s.section, s.group) == ('data', None)
    and s.name in holder
    and holder[s.name].value is not None
  }


def load_task(config, options):
  """The task of `config` (with the task `options`); UsageError when its
  data are missing or bad (one line, before anything runs)."""
  try:
    return tasks.load_task(
      config.task,
      seed=config.data_seed,
      data_dir=config.data_dir,
      train_fraction=config.train_fraction,
      partition=config.partition,
      **options,
    )
  except tasks.DataError as e:
    raise UsageError(str(e)) from None
