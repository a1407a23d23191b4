// Inference transforms of a built model (official models/yolo.py BaseModel.fuse and
// tools/reparameterization.ipynb; spec shared/spec/model.md sections 6 and 7): Conv+BN folding,
// RepConvN folding into one 3x3 conv, and the PGI re-parameterisation that turns a trained dual
// model (yolov9-X, DualDDetect) into its single-branch inference model (gelan-X, DDetect).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/model.h"

namespace graph {

/// Fuses every RepConvN (RepConvN::fuse) and then every Conv (Conv::fuse) below `m`, like the
/// official BaseModel.fuse(). Outputs change only by float rounding (spec 6: ~1e-4 of the decoded
/// pixel coordinates in FP32). Training after fusion is not supported (BN is gone). Freezes the
/// storages of every Conv2d weight below `m` (the folded ones and the head's plain convolutions;
/// engine::Storage::freeze), so the CPU convolutions (the fused conv + bias + SiLU and the plain
/// forward) reorder each weight once, not once per call. Returns the number of
/// modules fused (0 on a model already fused; its weights are frozen all the same). Parameters
/// are expected on the CPU (values are folded in double on the host).
int fuse(Module& m);

/// Name-prefix renames that take the state of `dual` (a yolov9-X config, multi-branch head) to
/// the layers of `gelan` (gelan-X, single-branch head), as used by load_state_dict: head entries
/// first ("model.22.cv2." -> "model.29.cv4.", "model.22.cv3." -> "model.29.cv5.", "model.22.dfl."
/// -> "model.29.dfl2."), then one "model.<i>." -> "model.<j>." per trunk layer. The layers are
/// aligned in order by type, arguments and (mapped) inputs, a Silence of the image standing for
/// the image; the gelan head is matched to the dual head's last branch (the main branch, spec
/// 2.17). This reproduces the notebook's table (spec 7: t/s i -> i, head 22 <- 29; m/c i -> i+1,
/// head 22 <- 38; e 0..28 -> same, 29..41 -> +7, head 42 <- 49).
/// Throws engine::ConfigError naming the first gelan layer with no counterpart.
std::vector<std::pair<std::string, std::string>> pgi_mapping(const ModelConfig& gelan, const ModelConfig& dual);

/// The re-parameterised inference model: builds `gelan_cfg` (its nc must equal dual's) and copies
/// the dual model's tensors through pgi_mapping (weights, biases, BN running stats,
/// num_batches_tracked, DFL weights; no numerical change). Returned in eval mode. Its outputs
/// equal the dual model's main branch (raw[1], decoded[1]) up to float rounding.
/// Throws engine::ConfigError (layers do not correspond, nc differs) or engine::ShapeError (a
/// tensor shape differs, naming the tensor).
std::shared_ptr<Model> reparameterize(const Model& dual, const ModelConfig& gelan_cfg);

}  // namespace graph
