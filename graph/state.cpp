// state_dict loading/saving by official names (graph/state.h).
#include "graph/state.h"

#include <set>

#include "engine/autograd.h"
#include "engine/error.h"

namespace graph {

std::string source_name(const std::string& name, const LoadOptions& opts) {
  for (const auto& [from, to] : opts.rename)
    if (name.compare(0, from.size(), from) == 0) return opts.prefix + to + name.substr(from.size());
  return opts.prefix + name;
}

void load_state_dict(Module& m, const std::map<std::string, Tensor>& src, const LoadOptions& opts) {
  const auto dst = m.state_dict();
  std::vector<const Tensor*> found;
  std::set<std::string> used;
  found.reserve(dst.size());
  for (const auto& [name, t] : dst) {
    const std::string key = source_name(name, opts);
    auto it = src.find(key);
    Y9_CHECK_SHAPE(it != src.end(), "load_state_dict: missing tensor '", key, "'",
                   key == name ? std::string() : " (for model tensor '" + name + "')");
    const Tensor& s = it->second;
    const bool scalar_like = s.numel() == 1 && t.numel() == 1 && s.dim() <= 1 && t.dim() <= 1;
    Y9_CHECK_SHAPE(s.shape() == t.shape() || scalar_like, "load_state_dict: shape mismatch for '", name, "': source '",
                   key, "' has ", engine::shape_str(s.shape()), ", model has ", engine::shape_str(t.shape()));
    found.push_back(&s);
    used.insert(key);
  }
  if (opts.strict_unused)
    for (const auto& [key, t] : src)
      if (key.compare(0, opts.prefix.size(), opts.prefix) == 0)
        Y9_CHECK_SHAPE(used.count(key) != 0, "load_state_dict: source tensor '", key, "' ",
                       engine::shape_str(t.shape()), " matches no model tensor");
  engine::autograd::NoGradGuard no_grad;
  for (size_t k = 0; k < dst.size(); ++k) {
    Tensor d = dst[k].second;
    d.copy_(found[k]->reshape(d.shape()));
  }
}

}  // namespace graph
