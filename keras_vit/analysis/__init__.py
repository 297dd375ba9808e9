"""Looking inside a ViT: attention rollout and distance, embedding analyses, few-shot probe.

Everything works on any keras_vit model, plain or hybrid, square or not:

    probe = AttentionProbe(model)
    out = probe(images)                        # attention (L, B, heads, T, T), tokens
    maps = probe.attention_rollout(images)     # heatmaps over the grid, upsampled maps
    dist = probe.mean_attention_distance(images)   # (L, heads) pixels
    sim = position_embedding_similarity(model)     # (rows, cols, rows, cols)
    pcs = patch_embedding_components(model)        # (k, P, P, C)
    acc = few_shot_linear_eval(train_x, train_y, test_x, test_y, shots=5)
    written = analyze(model, ["photos/"], "analysis/")  # every figure and analysis.json
    compare_runs(["runs/vit", "runs/bit"], "comparison/")  # comparison.md, comparison.png
"""

from keras_vit.analysis.compare import compare_runs
from keras_vit.analysis.distance import mean_attention_distance, patch_distances
from keras_vit.analysis.embeddings import (
                                           PatchComponents,
                                           patch_embedding_components,
                                           position_embedding_similarity,
)
from keras_vit.analysis.few_shot import few_shot_indices, few_shot_linear_eval, fit_linear_probe
from keras_vit.analysis.figures import analyze
from keras_vit.analysis.flops import forward_flops
from keras_vit.analysis.plots import (
                                           plot_attention_rollout,
                                           plot_mean_attention_distance,
                                           plot_patch_embedding_components,
                                           plot_position_embedding_similarity,
)
from keras_vit.analysis.probe import AttentionProbe, ProbeOutputs, pooled_features
from keras_vit.analysis.rollout import RolloutResult, attention_rollout, overlay, rollout

__all__ = [
    "AttentionProbe", "ProbeOutputs", "pooled_features",
    "rollout", "attention_rollout", "RolloutResult", "overlay",
    "mean_attention_distance", "patch_distances",
    "position_embedding_similarity", "patch_embedding_components", "PatchComponents",
    "few_shot_linear_eval", "few_shot_indices", "fit_linear_probe",
    "plot_attention_rollout", "plot_mean_attention_distance",
    "plot_position_embedding_similarity", "plot_patch_embedding_components",
    "analyze", "compare_runs", "forward_flops",
]
