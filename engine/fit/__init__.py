"""One memory model and one speed model for the advisor and the loaders: what a load takes, how to load within a
budget, and how fast it would answer here.

Public API:
    ModelFacts, facts_from_gguf, facts_from_shape     engine.fit.facts   (what a model is, memory-wise)
    MemoryBreakdown, KV_TYPES, kv_bytes_per_token     engine.fit.memory  (bytes of weights, KV, buffers, runtime)
    MemoryBudget, DeviceBudget                        engine.fit.budget  (RAM and each GPU, with headroom)
    LoadPlan, DevicePlan, plan_load                   engine.fit.plan    (context, slots, KV type, GPU layers)
    MachineSpeed, SpeedEstimate, estimate_speed       engine.fit.speed   (how fast a load answers here)
    machine_speed, speed_for                          engine.fit.probe   (this machine's rates, measured once; import it from there)
"""

from engine.fit.budget import DeviceBudget, MemoryBudget
from engine.fit.facts import ModelFacts, facts_from_gguf, facts_from_shape
from engine.fit.memory import KV_TYPES, LLAMACPP_KV_TYPES, PAGED_KV_TYPES, MemoryBreakdown, kv_bytes_per_token
from engine.fit.plan import DevicePlan, LoadPlan, plan_load
from engine.fit.speed import MachineSpeed, SpeedEstimate, estimate_speed

__all__ = [
    "ModelFacts",
    "facts_from_gguf",
    "facts_from_shape",
    "MemoryBreakdown",
    "KV_TYPES",
    "LLAMACPP_KV_TYPES",
    "PAGED_KV_TYPES",
    "kv_bytes_per_token",
    "MemoryBudget",
    "DeviceBudget",
    "LoadPlan",
    "DevicePlan",
    "plan_load",
    "MachineSpeed",
    "SpeedEstimate",
    "estimate_speed",
]
