"""Front ends: models written elsewhere mapped onto the model API (ark_runtime/model.py).

    imported = ark_runtime.from_torch(module.eval(), (input_ids,), {"use_cache": False})
    imported.model                      # the Model, ready for lower() or Runtime
    imported.bind(input_ids)            # every model input's tensor: parameters where PyTorch holds them

`from_torch` (torch_export.py) goes through torch.export; torch is imported only when it is called, so the runtime
imports without it. hf_decode.py builds Hugging Face causal LMs' prefill and decode step, with their caches as states. `docs/runtime.md` ("From PyTorch") lists what maps and what is refused.
"""

from ark_runtime.frontend.errors import FrontendError
from ark_runtime.frontend.imported import Imported, InputBinding, Origin, OutputBinding, Source
from ark_runtime.frontend.torch_export import from_torch

__all__ = ["FrontendError", "Imported", "InputBinding", "Origin", "OutputBinding", "Source", "from_torch"]
