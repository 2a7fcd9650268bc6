"""TFF's program layer (`tff.program`, `tff.learning.programs`) on our tasks.

    data_source.py  `ClientDataSource`: a task's clients as a
                    `tff.program.FederatedDataSource` for `train_model`,
                    whose iterator can be copied and checkpointed and which
                    picks each round's clients as the simulation's sampler
                    does (`simulation.sampling`)

With `runtime.program_context()` (an async context on our worker) and any
algorithm's process, a program trains with `train_model`, checkpoints and
resumes: docs/guide/porting.md, section 3. Importing this package loads no
TensorFlow; `data_source` loads TensorFlow and TFF.
"""
