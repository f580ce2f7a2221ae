#pragma once
/// \file
/// A tiny command-line parser for the example tools. Options are registered with a target variable
/// and a help line; `parse` fills the targets and throws `CliError` for an unknown flag, a missing
/// value or a value that does not parse as the target's type. `--help` / `-h` prints `help()`.
///
/// ```cpp
/// Cli cli("barato_generate", "Generate text with a llama2.c model.");
/// cli.option("--steps", steps, "N", "total positions including the prompt");
/// cli.flag("--json", json, "print one JSON object");
/// if (!cli.parse(argc, argv)) return 0;   // --help was printed
/// ```
/// Both `--name value` and `--name=value` are accepted. `run_tool` wraps a tool's main: a `CliError`
/// exits with status 2 (usage), a `barato::error` with status 1, both with a message on stderr.

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "barato/core/error.hpp"

namespace barato_examples {

#ifdef BARATO_DEFAULT_DATA_DIR
/// The data folder of the tools and tutorials (stories260K/, text/): $BARATO_DATA_DIR when set, else
/// BARATO_DEFAULT_DATA_DIR (the build's ../shared/data beside the source tree).
[[nodiscard]] inline std::filesystem::path data_dir() {
  if (const char* env = std::getenv("BARATO_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return BARATO_DEFAULT_DATA_DIR;
}
#endif

/// A command-line usage error (unknown flag, missing or malformed value).
class CliError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Cli {
 public:
  Cli(std::string program, std::string description) : program_(std::move(program)), description_(std::move(description)) {}

  /// An option taking a value, parsed as the type of `target` (std::string, integers, float, double).
  /// The help line shows the current value of `target` as the default.
  template <class T>
  Cli& option(std::string name, T& target, std::string value_name, std::string help) {
    Opt o{std::move(name), std::move(value_name), std::move(help), true, default_text(target), {}};
    const std::string flag = o.name;
    o.set = [&target, flag](std::string_view v) { target = parse_value<T>(flag, v); };
    opts_.push_back(std::move(o));
    return *this;
  }
  /// A boolean flag (no value): sets `target` to true.
  Cli& flag(std::string name, bool& target, std::string help) {
    opts_.push_back(Opt{std::move(name), "", std::move(help), false, "", [&target](std::string_view) { target = true; }});
    return *this;
  }
  /// Free text appended to the help (protocols, environment variables, examples).
  Cli& epilog(std::string text) {
    epilog_ = std::move(text);
    return *this;
  }

  /// Parses argv. Returns false when --help was printed (the tool should exit 0).
  bool parse(int argc, const char* const* argv) {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a == "--help" || a == "-h") {
        std::fputs(help().c_str(), stdout);
        return false;
      }
      std::string_view value;
      bool has_inline = false;
      if (const auto eq = a.find('='); a.starts_with("--") && eq != std::string_view::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
      Opt* o = find(a);
      if (o == nullptr) throw CliError("unknown option '" + std::string(a) + "' (see --help)");
      if (!o->takes_value) {
        if (has_inline) throw CliError("option " + o->name + " takes no value");
        o->set({});
        continue;
      }
      if (!has_inline) {
        if (i + 1 >= argc) throw CliError("option " + o->name + " needs a value " + o->value_name);
        value = argv[++i];
      }
      o->set(value);
    }
    return true;
  }

  /// The help text: usage line, description, one line per option with its default, epilog.
  [[nodiscard]] std::string help() const {
    std::string s = "usage: " + program_ + " [options]\n\n" + description_ + "\n\noptions:\n";
    const auto line = [&](std::string left, const std::string& text) {
      left = "  " + left;
      if (left.size() < 28) left.resize(28, ' ');
      else left += "  ";
      std::string body;  // continuation lines of a multi-line help text line up under its first line
      for (const char c : text) {
        body += c;
        if (c == '\n') body.append(28, ' ');
      }
      s += left + body + "\n";
    };
    for (const auto& o : opts_)
      line(o.name + (o.takes_value ? " " + o.value_name : ""),
           o.help + (o.takes_value && !o.default_text.empty() ? " (default: " + o.default_text + ")" : ""));
    line("--help, -h", "print this help");
    if (!epilog_.empty()) s += "\n" + epilog_ + "\n";
    return s;
  }

  /// Runs `body()` and maps errors to exit codes: CliError → 2, barato::error / std::exception → 1.
  template <class F>
  static int run_tool(const char* program, F&& body) {
    try {
      return body();
    } catch (const CliError& e) {
      std::fprintf(stderr, "%s: error: %s\n", program, e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: error: %s\n", program, e.what());
      return 1;
    }
  }

 private:
  struct Opt {
    std::string name, value_name, help;
    bool takes_value = true;
    std::string default_text;
    std::function<void(std::string_view)> set;
  };

  Opt* find(std::string_view name) {
    for (auto& o : opts_)
      if (o.name == name) return &o;
    return nullptr;
  }

  template <class T>
  static std::string default_text(const T& v) {
    if constexpr (std::is_same_v<T, std::string>) return v.empty() ? std::string() : "\"" + v + "\"";
    else if constexpr (std::is_floating_point_v<T>) {
      std::string s = std::to_string(v);
      while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
      return s;
    } else return std::to_string(v);
  }

  template <class T>
  static T parse_value(const std::string& flag, std::string_view v) {
    const auto bad = [&](const char* what) {
      return CliError("option " + flag + ": expected " + what + ", got '" + std::string(v) + "'");
    };
    if constexpr (std::is_same_v<T, std::string>) {
      return std::string(v);
    } else if constexpr (std::is_integral_v<T>) {
      T out{};
      if (v.empty() || (std::is_unsigned_v<T> && v.front() == '-')) throw bad(std::is_unsigned_v<T> ? "a non-negative integer" : "an integer");
      const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
      if (ec != std::errc() || p != v.data() + v.size()) throw bad("an integer");
      return out;
    } else {
      static_assert(std::is_floating_point_v<T>, "Cli: unsupported option type");
      const std::string s(v);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) throw bad("a number");
      return static_cast<T>(d);
    }
  }

  std::string program_, description_, epilog_;
  std::vector<Opt> opts_;
};

}  // namespace barato_examples
