"""Text tasks: Shakespeare (TFF sqlite, pg100 roles) and Sent140, and models."""

import collections
import csv
import gzip
import json
import sqlite3

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tasks import base
from tasks import sent140
from tasks import shakespeare
from tasks import text_models
from tff_algos.simulation import experiment
from tff_algos.simulation.config import Config

CHAR_LSTM_PARAMS = 820_522  # 90·8 + 4·256·265 + 4·256·513 + 256·90 + 90
SENT140_BODY = 891_394  # 4·256·(100+257) + 4·256·513 + 256·2 + 2


# ----------------------------------------------------------------- helpers
def write_sqlite(path, clients, drop_last=False):
  """A TFF-schema Shakespeare sqlite: clients = {id: (train, test) lists}."""
  db = sqlite3.connect(path)
  db.execute(
    'CREATE TABLE examples (split_name TEXT, client_id TEXT, '
    'serialized_example_proto BLOB)'
  )
  db.execute(
    'CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, '
    'num_examples INTEGER)'
  )
  rows = []
  for client, splits in clients.items():
    for split, snippets in zip(('train', 'test'), splits):
      db.execute(
        'INSERT INTO client_metadata VALUES (?, ?, ?)',
        (client, split, len(snippets)),
      )
      for s in snippets:
        example = tf.train.Example(
          features=tf.train.Features(
            feature={
              'snippets': tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[s.encode()])
              )
            }
          )
        )
        rows.append((split, client, example.SerializeToString()))
  db.executemany(
    'INSERT INTO examples VALUES (?, ?, ?)', rows[:-1] if drop_last else rows
  )
  db.commit()
  db.close()


TINY_CLIENTS = {
  'PLAY_A_KING': (
    ['Now is the winter of our discontent', 'x' * 100, ''],
    ['Made glorious summer'],
  ),
  'PLAY_A_FOOL': (['Nuncle!'], ['Ho, ho \u00e9']),
  'PLAY_B_LADY': (
    ['Out, damned spot!', "What, will these hands ne'er be clean?"],
    ["Here's the smell of the blood still"],
  ),
}


@pytest.fixture
def tiny_tff(tmp_path):
  (tmp_path / 'tff').mkdir()
  write_sqlite(tmp_path / 'tff' / 'shakespeare.sqlite', TINY_CLIENTS)
  return tmp_path


def run_one_round(tmp_path, task, clients=2):
  """One FedAvg round (K=2, E=1, B=10) on the task's first `clients`."""
  arrays = [tasks.client_arrays(task.train), tasks.client_arrays(task.test)]
  names = task.train.client_ids[:clients]
  small = base.FederatedTask(
    name=task.name,
    model_fn=task.model_fn,
    train=base.client_data_from_arrays(dict(zip(names, arrays[0]))),
    test=base.client_data_from_arrays(dict(zip(names, arrays[1]))),
  )
  config = Config(
    algo='fedavg',
    rounds=1,
    clients_per_round=2,
    epochs=1,
    batch_size=10,
    client_lr=0.5,
    eval_every=1,
  )
  rows = experiment.run(
    config, small, str(tmp_path / 'run'), show_progress=False
  )
  assert len(rows) == 2 and rows[1]['participants'] == 2
  assert all(np.isfinite(r['train_loss']) for r in rows)
  assert 0 <= rows[1]['test_accuracy'] <= 1
  return rows


def assert_next_character_examples(task):
  """Every client of `task` holds examples of the char-LSTM's input spec
  (build_task's, which test_tff_shakespeare_tiny_sqlite trains): int32
  windows of 80 in the vocabulary, y being x one character on."""
  for client_data in (task.train, task.test):
    for arrays in tasks.client_arrays(client_data):
      assert len(arrays['x']) >= 1
      assert arrays['x'].shape[1:] == (80,) and arrays['y'].shape[1:] == (80,)
      assert arrays['x'].dtype == arrays['y'].dtype == np.int32
      assert arrays['x'].min() >= 0 and arrays['x'].max() < 90
      np.testing.assert_array_equal(arrays['x'][:, 1:], arrays['y'][:, :-1])


# ------------------------------------------------------------ tokenization
def test_tokenization_matches_tff_baseline_preprocessing():
  baselines = tff.simulation.baselines
  prep = baselines.shakespeare.char_prediction_preprocessing
  snippets = [
    'Now is the winter of our discontent\n' * 3,
    '',
    'é~{}' + 'a' * 79,
  ]
  preprocess = prep.create_preprocess_fn(
    baselines.ClientSpec(num_epochs=1, batch_size=1000, shuffle_buffer_size=1)
  )
  dataset = tf.data.Dataset.from_tensor_slices(
    collections.OrderedDict(snippets=snippets)
  )
  x, y = next(iter(preprocess(dataset)))
  ours = shakespeare.to_examples([s.encode() for s in snippets])
  np.testing.assert_array_equal(ours['x'], x.numpy())
  np.testing.assert_array_equal(ours['y'], y.numpy())
  assert shakespeare.VOCAB_SIZE == 90 and prep.get_special_tokens() == (
    shakespeare.PAD,
    shakespeare.OOV,
    shakespeare.BOS,
    shakespeare.EOS,
  )


# ------------------------------------------------------- shakespeare (TFF)
def test_tff_shakespeare_tiny_sqlite(tiny_tff, tmp_path):
  task = shakespeare.TASKS['shakespeare'](str(tiny_tff), 0)
  assert sorted(task.train.client_ids) == sorted(TINY_CLIENTS)
  assert_next_character_examples(task)
  train = dict(zip(task.train.client_ids, tasks.client_arrays(task.train)))
  # 'x'*100 → 102 tokens → 2 windows; '' → 1; 35 chars → 1.
  assert len(train['PLAY_A_KING']['x']) == 4
  assert 'Nuncle!' in shakespeare.detokenize(train['PLAY_A_FOOL']['x'][0])
  # TFF's own reader sees the same snippets.
  tff_train, _ = shakespeare.tff_client_data(str(tiny_tff))
  for client, (snippets, _) in TINY_CLIENTS.items():
    got = [
      e['snippets'].numpy().decode()
      for e in tff_train.create_tf_dataset_for_client(client)
    ]
    assert got == snippets
  rows = run_one_round(tmp_path, task)
  assert rows[1]['local_steps'] >= 2


@pytest.mark.fast
def test_tff_shakespeare_missing_and_corrupt(tmp_path):
  with pytest.raises(tasks.DataError, match=r'tff/shakespeare\.sqlite'):
    shakespeare.load_shakespeare(str(tmp_path))
  (tmp_path / 'tff').mkdir()
  path = tmp_path / 'tff' / 'shakespeare.sqlite'
  write_sqlite(path, TINY_CLIENTS, drop_last=True)  # A row missing.
  with pytest.raises(tasks.DataError, match='client_metadata'):
    shakespeare.load_shakespeare(str(tmp_path))
  write_sqlite(tmp_path / 'whole.sqlite', TINY_CLIENTS)
  data = (tmp_path / 'whole.sqlite').read_bytes()
  path.unlink()
  path.write_bytes(data[: len(data) // 2])  # Truncated.
  with pytest.raises(tasks.DataError, match='truncated or corrupt'):
    shakespeare.load_shakespeare(str(tmp_path))
  path.write_bytes(b'not a database' * 100)
  with pytest.raises(tasks.DataError):
    shakespeare.load_shakespeare(str(tmp_path))


def test_tff_shakespeare_shared_data(shared_data):
  train, test = shakespeare.read_tff_shakespeare(str(shared_data))
  assert len(train) == len(test) == 715
  assert sum(map(len, train.values())) == 16_068
  assert sum(map(len, test.values())) == 2_356
  counts = []
  for split in (train, test):
    sizes = [len(shakespeare.to_examples(s)['x']) for s in split.values()]
    assert min(sizes) >= 1
    counts.append(sum(sizes))
  assert counts == [37_784, 5_490]  # 80-char sequences (measured).
  task = shakespeare.load_shakespeare(str(shared_data), num_clients=3)
  assert len(task.train.client_ids) == 3


# ----------------------------------------------------------------- models
@pytest.mark.fast
def test_char_lstm_parameters_and_masked_metrics():
  assert text_models.char_lstm_num_params(90) == CHAR_LSTM_PARAMS
  model = shakespeare.build_task(
    't', {'a': ['hi']}, {'a': ['ho']}, ''
  ).model_fn()
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == (
    CHAR_LSTM_PARAMS
  )
  assert not model.non_trainable_variables
  fedprox = shakespeare.build_task(  # FedProx's LSTM: 100 units a layer.
    't', {'a': ['hi']}, {'a': ['ho']}, '', units=100
  ).model_fn()
  assert [v.shape[-1] for v in fedprox.trainable_variables[1:4]] == [400] * 3
  assert sum(int(np.prod(v.shape)) for v in fedprox.trainable_variables) == (
    text_models.char_lstm_num_params(90, units=100)
  )
  y = tf.constant([[3, 5, 0, 0]])
  logits = tf.one_hot([[3, 4, 1, 0]], 6) * 10.0  # Right, wrong, pad, pad.
  accuracy = text_models.MaskedSparseCategoricalAccuracy()
  accuracy.update_state(y, logits)
  assert accuracy.result().numpy() == pytest.approx(0.5)
  assert accuracy.name == 'accuracy'
  loss = text_models.MaskedSparseCategoricalCrossentropy()
  full = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits).numpy()
  assert loss(y, logits).numpy() == pytest.approx(full[0, :2].mean(), 1e-5)


def test_sent140_lstm_parameters():
  assert text_models.sent140_lstm_num_params(50, 100, False) == (
    SENT140_BODY + 5_000,
    0,
  )
  model = text_models.sent140_lstm(50)()
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == (
    SENT140_BODY + 5_000
  )
  glove = np.arange(50 * 4, dtype=np.float32).reshape(50, 4)
  model = text_models.sent140_lstm(50, embeddings=glove)()
  trainable, frozen = text_models.sent140_lstm_num_params(50, 4, True)
  assert trainable == 4 * 256 * 261 + 4 * 256 * 513 + 514 == 793_090
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == (
    trainable
  )
  [table] = model.non_trainable_variables
  np.testing.assert_array_equal(table.numpy(), glove)
  assert frozen == 200


# ------------------------------------------------------- shakespeare roles
PG100 = """\ufeffThe Project Gutenberg EBook of The Complete Works
\r
THE SONNETS\r
\r
by William Shakespeare\r
\r
  From fairest creatures we desire increase,\r
\r
1603\r
\r
THE TRAGEDY OF TESTING\r
\r
by William Shakespeare\r
\r
<<THIS ELECTRONIC VERSION OF THE COMPLETE WORKS OF WILLIAM\r
  FAKE. licence lines are not speech>>\r
\r
ACT I. SCENE 1.\r
Enter HAMLET and HORATIO\r
\r
  HAMLET. To be, or not to be:\r
    that is the question.\r
  HORATIO. My lord?\r
  HAMLET. Whether 'tis nobler in the mind\r
    to suffer the slings.\r
                                                         Exit\r
  GHOST. Swear.\r
  First Lord. Hail!\r
  FIRST LORD. All hail!\r
\r
THE COMEDY OF ERRORS\r
\r
by William Shakespeare\r
\r
ACT I. SCENE 1\r
\r
AEGEON. Proceed, Solinus, to procure my fall,\r
  And by the doom of death end woes and all.\r
DUKE. Merchant of Syracuse, plead no more;\r
\r
End of the Project Gutenberg EBook of The Complete Works\r
"""


@pytest.fixture
def tiny_pg100(tmp_path):
  (tmp_path / 'shakespeare').mkdir()
  with gzip.open(
    tmp_path / 'shakespeare' / 'pg100.txt.gz',
    'wt',
    encoding='utf-8',
    newline='',
  ) as f:
    f.write(PG100)
  return tmp_path


def test_roles_parser_and_tasks(tiny_pg100):
  roles = shakespeare.read_roles(str(tiny_pg100))
  assert dict(roles) == {
    'THE_TRAGEDY_OF_TESTING_HAMLET': [
      'To be, or not to be:',
      'that is the question.',
      "Whether 'tis nobler in the mind",
      'to suffer the slings.',
    ],
    'THE_TRAGEDY_OF_TESTING_FIRST_LORD': ['Hail!', 'All hail!'],
    'THE_COMEDY_OF_ERRORS_AEGEON': [
      'Proceed, Solinus, to procure my fall,',
      'And by the doom of death end woes and all.',
    ],
  }
  task = shakespeare.TASKS['shakespeare_roles'](str(tiny_pg100), 0)
  assert len(task.train.client_ids) == 3
  train = tasks.client_arrays(task.train)
  test = tasks.client_arrays(task.test)
  assert shakespeare.detokenize(train[0]['x'][0]).startswith(
    '^To be, or not to be:\nthat is the question.\nWhether'
  )
  assert shakespeare.detokenize(test[0]['x'][0]) == '^to suffer the slings.$'
  iid = shakespeare.TASKS['shakespeare_roles_iid'](str(tiny_pg100), 0)
  assert len(iid.train.client_ids) == 3
  iid_train, iid_test = shakespeare.split_roles(roles, iid=True, seed=0)
  assert sorted(
    line for s in iid_train.values() for line in s[0].split('\n')
  ) == (sorted(line for r in roles.values() for line in r[:-1]))
  assert all(len(s[0].split('\n')) == 1 for s in iid_test.values())
  # Both are build_task's, whose output trains (the sqlite test's round).
  for built in (task, iid):
    assert_next_character_examples(built)


def test_roles_missing_and_truncated(tmp_path, tiny_pg100):
  with pytest.raises(tasks.DataError, match=r'shakespeare/pg100\.txt\.gz'):
    shakespeare.read_roles(str(tmp_path / 'nowhere'))
  path = tiny_pg100 / 'shakespeare' / 'pg100.txt.gz'
  data = path.read_bytes()
  path.write_bytes(data[: len(data) // 2])
  with pytest.raises(tasks.DataError, match='truncated'):
    shakespeare.read_roles(str(tiny_pg100))
  with gzip.open(path, 'wt', encoding='utf-8') as f:
    f.write(PG100[: len(PG100) // 2])  # Valid gzip, text cut short.
  with pytest.raises(tasks.DataError, match='truncated'):
    shakespeare.read_roles(str(tiny_pg100))


def test_roles_shared_data(shared_data):
  roles = shakespeare.read_roles(str(shared_data))
  assert len(roles) == 1_191 and min(map(len, roles.values())) >= 2
  assert sum(map(len, roles.values())) == 94_800
  assert 'THE_TRAGEDY_OF_KING_LEAR_LEAR' in roles  # Speakers abbreviated.
  assert 'THE_COMEDY_OF_ERRORS_DROMIO_OF_SYRACUSE' in roles
  train, test = shakespeare.split_roles(roles)
  assert list(train) == list(test) == list(roles)


# ----------------------------------------------------------------- sent140
def leaf_json(users):
  """LEAF Sent140 JSON: users = {user: [(text, y)]}."""
  return dict(
    users=list(users),
    num_samples=[len(t) for t in users.values()],
    user_data={
      u: dict(
        x=[
          [
            str(i),
            'Mon Apr 06 22:19:45 PDT 2009',
            'NO_QUERY',
            u,
            text,
            'training',
          ]
          for i, (text, _) in enumerate(t)
        ],
        y=[y for _, y in t],
      )
      for u, t in users.items()
    },
  )


TWEETS = {
  'alice': [
    ('I love this, so good!', 1),
    ('so sad today', 0),
    ('good good morning', 1),
  ],
  'bob': [('Worst day. Sad!', 0), ('love it', 1)],
  'carol': [('meh', 0)],
}


@pytest.mark.fast
def test_sent140_leaf_folder_csv_and_sample(tmp_path):
  root = tmp_path / 'leaf' / 'sent140'
  for split, part in (('train', slice(0, -1)), ('test', slice(-1, None))):
    (root / split).mkdir(parents=True)
    (root / split / f'all_data_{split}.json').write_text(
      json.dumps(
        leaf_json({u: t[part] for u, t in TWEETS.items() if len(t) > 1})
      )
    )
  task = sent140.TASKS['sent140'](str(tmp_path / 'leaf'), 0)
  assert 'full LEAF' in task.description
  assert task.train.client_ids == ['alice', 'bob']
  train = tasks.client_arrays(task.train)
  assert [len(a['y']) for a in train] == [2, 1]
  for arrays in train + tasks.client_arrays(task.test):
    assert arrays['x'].shape[1:] == (25,) and set(arrays['y']) <= {0, 1}

  # Raw Sentiment140 CSV (six columns, no header, latin-1): 0/4 → 0/1.
  raw = tmp_path / 'raw' / 'sent140'
  raw.mkdir(parents=True)
  lines = [
    [
      '4' if y else '0',
      str(i),
      'Mon Apr 06 22:19:45 PDT 2009',
      'NO_QUERY',
      u,
      text,
    ]
    for u, t in TWEETS.items()
    for i, (text, y) in enumerate(t)
  ]
  lines.append(['2', '99', 'date', 'q', 'alice', 'neutral'])
  with open(raw / sent140.RAW_CSV, 'w', newline='', encoding='latin-1') as f:
    csv.writer(f, quoting=csv.QUOTE_ALL).writerows(lines)
  task = sent140.load(str(tmp_path / 'raw'), min_tweets=2)
  assert task.train.client_ids == ['alice', 'bob']
  sizes = [len(a['y']) for a in tasks.client_arrays(task.train)]
  assert sizes == [2, 1]  # alice: 3 of 4 tweets (neutral dropped), 90/10.
  assert [len(a['y']) for a in tasks.client_arrays(task.test)] == [1, 1]
  assert sent140.load(str(tmp_path / 'raw')).train.client_ids == ['alice']

  # The shared 7-column pandas copy: first line (a tweet) and index skipped.
  sample = tmp_path / 'sample.csv'
  with open(sample, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow([''] + lines[0])
    writer.writerows([[str(k)] + line for k, line in enumerate(lines)])
  by_user = sent140.read_csv(str(sample))
  assert {u: len(t) for u, t in by_user.items()} == {
    'alice': 3,
    'bob': 2,
    'carol': 1,
  }

  # A single LEAF test split, re-split per user (users with >= 2 tweets).
  (tmp_path / 'one' / 'sent140').mkdir(parents=True)
  (tmp_path / 'one' / 'sent140' / sent140.LEAF_SAMPLE).write_text(
    json.dumps(leaf_json(TWEETS))
  )
  task = sent140.load(str(tmp_path / 'one'))
  assert 'PARTIAL' in task.description
  assert task.train.client_ids == ['alice', 'bob']
  x = np.concatenate([a['x'] for a in tasks.client_arrays(task.train)])
  lengths = (x != sent140.PAD).sum(axis=1)
  for row, n in zip(x, lengths):  # Tokens first, then padding.
    assert (row[:n] != sent140.PAD).all() and (row[n:] == sent140.PAD).all()
  assert (
    x.max()
    < len(sent140.build_vocabulary(sent140.split_users(TWEETS, 2)[0], {})[0])
    + 2
  )
  np.testing.assert_array_equal(
    sent140.encode('I love this, so good!', {'so': 2, '!': 3}),
    [1, 1, 1, 1, 2, 1, 3] + [0] * 18,
  )  # i love this , so good !


@pytest.mark.slow
def test_sent140_glove_and_one_round(tmp_path):
  (tmp_path / 'sent140').mkdir()
  (tmp_path / 'sent140' / sent140.LEAF_SAMPLE).write_text(
    json.dumps(leaf_json(TWEETS))
  )
  glove = tmp_path / 'glove.txt'
  glove.write_text(
    'good 1 0 0 0\nsad 0 1 0 0\nunused 1 1 1 1\nlove 0 0 1 0\n! 0 0 0 1\n'
  )
  task = sent140.load(str(tmp_path), embeddings=str(glove))
  model = task.model_fn()
  [table] = model.non_trainable_variables
  assert table.shape == (2 + 4, 4)  # pad, unk, good, sad, love, !.
  np.testing.assert_array_equal(table.numpy()[:2], 0)
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == (
    793_090
  )
  vocabulary, _ = sent140.build_vocabulary(
    {'u': [('good good sad love !', 1)]}, {}, str(glove)
  )
  assert vocabulary == {'good': 2, 'sad': 3, 'love': 4, '!': 5}
  run_one_round(tmp_path, task)

  glove.write_text('good 1 0 0 0\nsad 0 1\n')
  with pytest.raises(tasks.DataError, match='2 values, expected 4'):
    sent140.load(str(tmp_path), embeddings=str(glove))
  with pytest.raises(tasks.DataError, match='GloVe'):
    sent140.load(str(tmp_path), embeddings=str(tmp_path / 'none.txt'))


def test_sent140_missing_and_corrupt(tmp_path):
  with pytest.raises(tasks.DataError) as error:
    sent140.load(str(tmp_path))
  for expected in (
    'train/*.json',
    sent140.RAW_CSV,
    sent140.LEAF_SAMPLE,
    str(tmp_path / 'sent140'),
  ):
    assert expected in str(error.value)
  (tmp_path / 'sent140').mkdir()
  path = tmp_path / 'sent140' / sent140.LEAF_SAMPLE
  text = json.dumps(leaf_json(TWEETS))
  path.write_text(text[: len(text) // 2])
  with pytest.raises(tasks.DataError, match='not a readable LEAF JSON'):
    sent140.load(str(tmp_path))
  broken = leaf_json(TWEETS)
  broken['num_samples'][0] = 5
  path.write_text(json.dumps(broken))
  with pytest.raises(tasks.DataError, match='truncated or corrupt'):
    sent140.load(str(tmp_path))
  csv_path = tmp_path / 'sent140' / sent140.RAW_CSV
  csv_path.write_text('"0","1","date","NO_QUERY","u","text"\n"4","2","da')
  with pytest.raises(tasks.DataError, match='last line is cut off'):
    sent140.load(str(tmp_path), source='csv')
  csv_path.write_text('"0","1","date","NO_QUERY","u","text"\n"4","2","da"\n')
  with pytest.raises(tasks.DataError, match=':2: 3 fields, expected 6'):
    sent140.load(str(tmp_path), source='csv')


def test_sent140_shared_data(shared_data):
  task = sent140.load(str(shared_data))
  assert 'PARTIAL' in task.description
  train, test = sent140._read_source(
    'leaf_sample',
    base.file_fingerprint(str(shared_data / 'sent140' / sent140.LEAF_SAMPLE)),
    2,
  )
  assert len(train) == len(test) == 906
  assert sum(map(len, train.values())) == 1_597
  assert sum(map(len, test.values())) == 915
  by_user = sent140.read_csv(
    str(shared_data / 'sent140' / 'training_sample_3000.csv')
  )
  assert len(by_user) == 2_969 and sum(map(len, by_user.values())) == 3_000
  manual = sent140.read_csv(
    str(shared_data / 'sent140' / 'testdata.manual.2009.06.14.csv')
  )
  assert sum(map(len, manual.values())) == 177 + 182  # Neutral dropped.
