"""The prepared model as the OpenVINO GenAI runtime reads it: OpenVINO's own model files, made from the shipped GGUF.

OpenVINO GenAI builds its model straight from a GGUF file (no exporter, no torch at run time), but reads only F32,
F16, Q4_0, Q4_1 and Q8_0 tensors: the catalog's Q4_K_M files also hold Q5_0, Q4_K and Q6_K ones, which it refuses
("gguf_tensor_to_f16 failed"). `requantize` writes a copy with every other tensor dequantized and quantized again
to Q8_0 (an 8-bit rounding of weights already rounded to 4-6 bits: the smallest second rounding that the runtime's
int8 kernels read; 4-bit weights decoded no faster on 2 cores and lost exact matches: docs/evaluation.md).
Metadata (the tokenizer, the chat template) is copied as it stands. Numpy only (the `gguf` package): ~25 s for the
0.5B model on 2 cores.

`write_openvino_model` then has the runtime read that copy once and save what it built (OpenVINO's IR: the model,
its tokenizer and detokenizer) into the model folder's `openvino/`: loading the IR took 3.4 s and 1.55 GB where
building from the GGUF took 15.1 s and 1.95 GB, with the same answers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from repocomp.errors import RepocompError

__all__ = ["IR_MODEL", "OPENVINO_DIR", "prepared_openvino_model", "requantize", "write_openvino_model"]

OPENVINO_DIR = "openvino"  # the runtime's model files, in a prepared model folder
IR_MODEL = "openvino_model.xml"  # the model's graph (its weights beside it in openvino_model.bin)
_Q8_0_FILE_TYPE = 7  # llama.cpp's file type "mostly Q8_0": the runtime picks its int8 path from it


def prepared_openvino_model(folder: Path) -> Path | None:
    """The folder of OpenVINO's model files in a prepared model `folder`, or None when it has none."""
    runtime = folder / OPENVINO_DIR
    return runtime if (runtime / IR_MODEL).is_file() else None


def requantize(source: Path, target: Path) -> Path:
    """Write `source` (a GGUF) to `target` with every tensor F32 or Q8_0; written beside `target` and renamed at
    the end, so an interrupted run leaves nothing at `target`."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize, quantize

    keep = (GGMLQuantizationType.F32, GGMLQuantizationType.Q8_0)
    partial = target.with_name(target.name + ".partial")
    try:
        reader = GGUFReader(source)
        writer = GGUFWriter(partial, reader.fields["general.architecture"].contents())
        for name, field in reader.fields.items():
            if name.startswith("GGUF.") or name == "general.architecture":  # the writer adds these itself
                continue
            if name == "general.file_type":
                writer.add_uint32(name, _Q8_0_FILE_TYPE)
            elif field.types[0] == GGUFValueType.ARRAY:
                writer.add_array(name, field.contents())
            else:
                writer.add_key_value(name, field.contents(), field.types[0])
        for tensor in reader.tensors:
            shape = [int(n) for n in reversed(tensor.shape)]  # GGUF lists dimensions innermost first
            if tensor.tensor_type == GGMLQuantizationType.F32:
                writer.add_tensor(tensor.name, np.asarray(tensor.data).reshape(shape))
                continue
            data = np.asarray(tensor.data) if tensor.tensor_type in keep else \
                quantize(dequantize(tensor.data, tensor.tensor_type).reshape(shape), GGMLQuantizationType.Q8_0)
            writer.add_tensor(tensor.name, data, raw_shape=data.shape, raw_dtype=GGMLQuantizationType.Q8_0)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        partial.replace(target)
    except (OSError, ValueError, KeyError, NotImplementedError) as exc:
        raise RepocompError(f"cannot write {target.name} for the openvino backend from {source}: {exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return target


def write_openvino_model(gguf: Path, target: Path) -> Path:
    """Write the model of `gguf`, re-encoded to Q8_0, as OpenVINO's IR into the folder `target`; built beside it and
    renamed at the end, so an interrupted run leaves no `target`."""
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        q8 = requantize(gguf, staging / "model-q8_0.gguf")
        try:
            import openvino_genai as og

            og.LLMPipeline(str(q8), "CPU", enable_save_ov_model=True)  # saves the IR beside the file it read
        except (ImportError, RuntimeError) as exc:
            raise RepocompError(f"OpenVINO GenAI could not read {q8.name}: {exc}") from None
        q8.unlink()
        if not (staging / IR_MODEL).is_file():
            raise RepocompError(f"OpenVINO GenAI wrote no {IR_MODEL} from {gguf}")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
