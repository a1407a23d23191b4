// Registration of the yolov9 subcommands. Each subcommand module adds itself in commands.cpp.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace apps {

/// Adds every subcommand (with its options) to `app`.
void register_commands(CLI::App& app);
/// Runs the one subcommand that was parsed; returns the process exit code.
int run_selected(CLI::App& app);

/// Called by each subcommand module: name, description, option setup, and the runner.
void add_command(CLI::App& app, const std::string& name, const std::string& description,
                 const std::function<void(CLI::App&)>& setup, std::function<int()> run);

}  // namespace apps
