"""Hand-built LayerGraphs and GPUs for the cost-model tests (no torch, no catalog needed).

Per-sequence figures of a GPT block with hidden h, heads a, sequence s, 16-bit:
FLOPs 24·s·h² + 4·s²·h forward, twice that backward (Narayanan et al., SC'21, eq. 3);
saved activations s·h·(34 + 5·a·s/h) bytes, 34·s·h with selective and 2·s·h with full
recomputation (Korthikanti et al., MLSys'23, Table 2).
"""

from __future__ import annotations

from cost_models.gpu import GpuSpec
from planner.cluster.model import Cluster, NodeGroup
from planner.graph.layers import Layer, LayerGraph


def gpt_graph(h: int = 1024, layers: int = 4, heads: int = 16, seq: int = 1024,
              vocab: int = 51200, name: str = "toy-gpt") -> LayerGraph:
    s = seq
    block_fwd = 24 * s * h * h + 4 * s * s * h
    out: list[Layer] = [Layer(
        index=0, name="embed", kind="embedding", params=vocab * h + s * h, fwd_flops=0.0,
        bwd_act_flops=0.0, bwd_weight_flops=0.0, fwd_matmul_flops=0.0,
        fwd_memory_bytes=4.0 * s * h, activation_bytes=0.0, activation_bytes_selective=0.0,
        activation_bytes_full=0.0, output_bytes=2.0 * s * h, tp_allreduce_bytes=2.0 * s * h,
        tp_allreduces_fwd=1, max_tp=64, matmul_dim=h, gemm_params=0)]
    for i in range(layers):
        out.append(Layer(
            index=i + 1, name=f"layers.{i}", kind="block", params=12 * h * h + 13 * h,
            fwd_flops=block_fwd, bwd_act_flops=block_fwd, bwd_weight_flops=24.0 * s * h * h,
            fwd_matmul_flops=block_fwd, fwd_memory_bytes=2.0 * (20 * s * h + 3 * heads * s * s),
            activation_bytes=s * h * (34 + 5 * heads * s / h),
            activation_bytes_selective=34.0 * s * h,
            activation_bytes_full=2.0 * s * h, output_bytes=2.0 * s * h,
            tp_allreduce_bytes=2.0 * s * h, tp_allreduces_fwd=2, max_tp=heads, matmul_dim=h,
            gemm_params=gpt_block_gemm_params(h)))
    head_fwd = 2.0 * s * h * vocab
    out.append(Layer(
        index=layers + 1, name="head", kind="head", params=2 * h, fwd_flops=head_fwd,
        bwd_act_flops=head_fwd, bwd_weight_flops=head_fwd, fwd_matmul_flops=head_fwd,
        fwd_memory_bytes=8.0 * s * vocab, activation_bytes=4.0 * s * vocab + 2.0 * s * h,
        activation_bytes_selective=4.0 * s * vocab + 2.0 * s * h,
        activation_bytes_full=2.0 * s * h, output_bytes=0.0, tp_allreduce_bytes=0.0,
        tp_allreduces_fwd=0, max_tp=64, matmul_dim=h, gemm_params=0))
    return LayerGraph(name=name, seq_len=s, dtype_bytes=2, layers=tuple(out))


def gpt_block_gemm_params(h: int) -> int:
    """A GPT block's GEMM operands: the 12·h² weights of its q/k/v, output and MLP
    projections and the 9·h biases their `addmm`s add (GPT-2; not the two LayerNorms' 4·h)."""
    return 12 * h * h + 9 * h


def gpu(name: str = "TEST-GPU", memory_gib: float = 80.0, tflops: float = 300.0,
        hbm: float = 2000.0, nvlink: float = 300.0, generation: str = "ampere") -> GpuSpec:
    return GpuSpec(name=name, vendor="nvidia", generation=generation, memory_gib=memory_gib,
                   hbm_gb_per_s=hbm, peak_tflops={"fp16": tflops, "bf16": tflops, "fp32": 20.0},
                   intra_node_gb_per_s=nvlink, intra_node_link="nvlink", pcie_gb_per_s=32.0,
                   tdp_w=400.0)


def cluster(*groups: tuple[str, GpuSpec, int, int, float, float | None],
            latency_us: float = 5.0) -> Cluster:
    """groups: (name, gpu, node count, gpus per node, inter-node Gbit/s, $ per GPU-hour)."""
    return Cluster(name="test", latency_us=latency_us, spec={"name": "test"}, groups=tuple(
        NodeGroup(name=n, count=c, gpu=g, gpus_per_node=k, intra_node=g.intra_node_link,
                  intra_node_gb_per_s=g.intra_node_gb_per_s, inter_node_gbps=bw,
                  price_per_gpu_hour=price)
        for n, g, c, k, bw, price in groups))
