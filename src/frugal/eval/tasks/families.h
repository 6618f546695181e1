// Factories of the task families; task_registry.cc lists them by name.
#pragma once

#include <memory>

#include "frugal/eval/task.h"

namespace frugal::eval {

std::unique_ptr<TaskGenerator> make_passkey_task();
std::unique_ptr<TaskGenerator> make_kv_recall_task();
std::unique_ptr<TaskGenerator> make_var_track_task();
std::unique_ptr<TaskGenerator> make_arithmetic_task();
std::unique_ptr<TaskGenerator> make_word_count_task();

}  // namespace frugal::eval
