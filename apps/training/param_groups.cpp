// Official optimizer parameter split and --freeze over the detection model's modules.
#include "apps/training/param_groups.h"

#include <memory>
#include <set>

namespace training {

std::function<bool(const std::string&)> norm_weight_predicate(Module& root, const std::string& prefix) {
  auto names = std::make_shared<std::set<std::string>>();
  for (auto& [mname, m] : root.named_modules()) {
    if (m->type_name().find("Norm") == std::string::npos) continue;
    for (const auto& [pname, t] : m->named_parameters())
      if (pname == "weight") names->insert(prefix + (mname.empty() ? "" : mname + ".") + pname);
  }
  return [names](const std::string& n) { return names->count(n) > 0; };
}

OfficialParamSplit official_param_split(Module& root, const std::string& prefix) {
  return split_official_param_groups(root.named_parameters(prefix), norm_weight_predicate(root, prefix));
}

std::vector<std::string> freeze_prefixes(const std::vector<int64_t>& freeze) {
  std::vector<std::string> out;
  if (freeze.size() > 1) {
    for (int64_t v : freeze) out.push_back("model." + std::to_string(v) + ".");
  } else if (freeze.size() == 1) {
    for (int64_t i = 0; i < freeze[0]; ++i) out.push_back("model." + std::to_string(i) + ".");
  }
  return out;
}

std::vector<std::string> apply_freeze(const std::vector<std::pair<std::string, Tensor>>& params,
                                      const std::vector<std::string>& prefixes) {
  std::vector<std::string> frozen;
  for (const auto& [name, t] : params) {
    for (const auto& p : prefixes) {
      if (name.find(p) != std::string::npos) {
        Tensor(t).set_requires_grad(false);
        frozen.push_back(name);
        break;
      }
    }
  }
  return frozen;
}

}  // namespace training
