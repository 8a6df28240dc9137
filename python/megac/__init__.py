"""megac from Python: models, their counts, and training sessions over megac's driver.

    import megac
    model = megac.Model.from_spec("gpt:layers=2,hidden=64,heads=4,seq=64,vocab=256")
    print(model.describe()["parameters"])
    session = megac.TrainSession(model, data="examples/tiny-corpus.npy", steps=3,
                                 global_batch=8, micro_batch=4, lr=3e-3)
    for _ in range(3):
        print(session.step())          # the step's metrics: the keys of --log-json
    weights = session.parameters()     # name -> numpy array, gathered whole
    session.stop()

The keyword arguments of TrainSession are `megac train`'s flags with underscores (global_batch=8
is --global-batch 8; True gives a bare flag, False or None leaves it out; a list gives several
values, as data_path=[0.7, "A", 0.3, "B"]). megac's errors raise MegacError with its message.
docs/python.md has the whole story.
"""
import json as _json
import os

from . import _megac
from ._megac import MegacError

__all__ = ["Model", "TrainSession", "MegacError"]


class Model:
    """A model megac can train: a zoo spec (or hf:PATH[,seq=S]) or an ONNX file."""

    def __init__(self, core):
        self._core = core

    @classmethod
    def from_spec(cls, spec):
        """A zoo model ("gpt:layers=2,hidden=64,...") or a transformers config ("hf:DIR,seq=S");
        a bad spec raises MegacError naming what is wrong."""
        return cls(_megac.Model.from_spec(str(spec)))

    @classmethod
    def from_onnx(cls, path, input_shapes=None):
        """An ONNX file; `input_shapes` binds symbolic input dims for describe(), as
        {"input_ids": [1, 64]} (training binds input_ids to the data's [micro_batch, S])."""
        shapes = {str(k): [int(d) for d in v] for k, v in (input_shapes or {}).items()}
        return cls(_megac.Model.from_onnx(str(path), shapes))

    @classmethod
    def from_torch(cls, module, example_inputs, path=None):
        """A torch.nn.Module exported by torch.onnx.export (torch is needed only here) to `path`
        (default: a temporary .onnx file that the Model keeps): `example_inputs` a tensor of
        token ids [b, S] or a tuple of inputs; the first input is named input_ids, the output
        logits, the batch dim dynamic (describe() binds it to the example's), training mode
        (dropout kept), opset 17."""
        import tempfile

        import torch
        inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        if path is None:
            handle, path = tempfile.mkstemp(prefix="megac-", suffix=".onnx")
            os.close(handle)
        torch.onnx.export(module, inputs, path, input_names=["input_ids"],
                          output_names=["logits"], opset_version=17, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING,
                          dynamic_axes={"input_ids": {0: "batch"}})
        return cls.from_onnx(path, {"input_ids": list(inputs[0].shape)})

    def describe(self):
        """`megac describe`'s counts of the forward graph as a dict: model, parameters,
        active_parameters, parameter_tensors, parameter_bytes, tokens, forward_flops,
        forward_matmul_flops, training_flops (3x forward), training_flops_per_token, ops."""
        return self._core.describe()

    def _args(self):
        if self._core.spec is not None:
            return ["--model", self._core.spec]
        return [self._core.file]

    def __repr__(self):
        return f"megac.Model({self._core.spec or self._core.file!r})"


def _flag_args(run_config):
    args = []
    for key, value in run_config.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args.append(flag)
            args.extend(str(v) for v in value)
        else:
            args += [flag, str(value)]
    return args


class TrainSession:
    """A training run of `model` on this process's rank, configured by `megac train`'s flags as
    keyword arguments. Under `mpirun -np N python SCRIPT.py` with ranks=N every rank runs the
    same script; rank 0 writes log_json / tensorboard_dir."""

    def __init__(self, model, **run_config):
        if not isinstance(model, Model):
            raise TypeError("megac.TrainSession takes a megac.Model (Model.from_spec, "
                            "Model.from_onnx), not " + type(model).__name__)
        self.model = model
        self._core = _megac.Session(model._args() + _flag_args(run_config))

    def step(self, batch=None):
        """One optimizer step on the configured data (batch None) or on `batch`, an integer
        array [global_batch, S + 1] of token ids (numpy, or a torch tensor via .numpy()); returns
        the step's metrics, the keys of the --log-json line. The GIL is released while it runs."""
        if batch is not None and hasattr(batch, "detach") and hasattr(batch, "numpy"):
            batch = batch.detach().cpu().numpy()  # a torch tensor
        return _json.loads(self._core.step(batch))

    def evaluate(self, part="val"):
        """The mean loss of eval_iters batches of the validation ("val") or test ("test") data;
        logged like the CLI's evaluations."""
        return self._core.evaluate(part)

    def parameters(self):
        """Every parameter, gathered whole in the model's own shapes, as {name: numpy array} on
        rank 0 (other ranks: {}); every rank calls it."""
        return self._core.parameters()

    def save(self):
        """A checkpoint of the steps done in the save= folder; returns its path."""
        return self._core.save()

    def stop(self):
        """Closes the logs and frees the session; later calls raise MegacError."""
        self._core.stop()

    @property
    def steps_done(self):
        return self._core.steps_done

    @property
    def sequence_length(self):
        return self._core.sequence_length

    @property
    def vocab(self):
        return self._core.vocab

    @property
    def rank(self):
        return self._core.rank

    @property
    def ranks(self):
        return self._core.ranks

    @property
    def global_batch(self):
        return self._core.global_batch

    @property
    def total_steps(self):
        return self._core.total_steps

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
