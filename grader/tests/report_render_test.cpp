// report.html in a real browser: Debian's chromium, headless, lays out a graded lab's report and
// a probe measures every chart it drew (the report itself has no script: the probe goes into a
// copy). Each <svg> must have a box, its lines, bars and markers non-empty boxes, its labels a
// non-zero text length. Chromium is part of the kit's set-up (tools/setup-debian.sh): without it
// this test fails, it does not skip. A screenshot is left in the working folder for a human eye.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "report_fixture.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddplab::grader::testing {
namespace {

/// $DDPLAB_CHROMIUM, else `chromium` on the PATH ("" if neither).
std::string find_chromium() {
  if (const char* env = std::getenv("DDPLAB_CHROMIUM"); env && *env) return env;
  std::stringstream path(std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  for (std::string dir; std::getline(path, dir, ':');) {
    const fs::path p = fs::path(dir) / "chromium";
    if (!dir.empty() && ::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

/// Runs `cmd` through the shell; its standard output.
std::string run(const std::string& cmd, int& status) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  status = ::pclose(f);
  return out;
}

std::string unescape(std::string s) {
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}}) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
      s.replace(at, from.size(), to);
    }
  }
  return s;
}

// Measures each chart as laid out; writes the result into <pre id="probe"> for --dump-dom.
constexpr const char* kProbe = R"js(<script>
const out = [];
for (const s of document.querySelectorAll('svg')) {
  const box = s.getBoundingClientRect();
  const visible = sel => [...s.querySelectorAll(sel)].filter(e => { const b = e.getBBox(); return b.width > 0 && b.height > 0; }).length;
  out.push({title: s.querySelector('title').textContent, width: box.width, height: box.height,
            lines: [...s.querySelectorAll('path[stroke-width="2"]')].filter(e => e.getBBox().width > 0).length,
            bars: visible('rect:has(> title)'), markers: visible('circle, path[fill]:not([fill="none"])'),
            texts: [...s.querySelectorAll('text')].filter(t => t.getComputedTextLength() > 0).length,
            all_texts: s.querySelectorAll('text').length});
}
const p = document.createElement('pre'); p.id = 'probe'; p.textContent = JSON.stringify(out); document.body.appendChild(p);
</script>
)js";

TEST(ReportRender, HeadlessChromiumDrawsEveryChart) {
  const std::string chromium = find_chromium();
  ASSERT_FALSE(chromium.empty())
      << "Debian's chromium is not installed (apt-get install chromium; tools/setup-debian.sh "
         "installs it): the report cannot be rendered";
  const ddplab::testing::ScratchDir scratch;
  const fs::path dir = scratch.dir();
  const std::string html = html_report({lab_with_runs(dir)});
  std::ofstream(dir / "report.html") << html;
  std::string probed = html;
  probed.insert(probed.rfind("</body>"), kProbe);
  std::ofstream(dir / "probe.html") << probed;

  // As root (CI) Chromium needs --no-sandbox; no GPU, a small /dev/shm and no D-Bus on a CI machine.
  const std::string base = fmt::format(
      "timeout 120 '{}' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--user-data-dir='{}' --window-size=1100,2200",
      chromium, (dir / "profile").string());
  int status = -1;
  const std::string dom = run(fmt::format("{} --dump-dom 'file://{}' 2>'{}'", base, (dir / "probe.html").string(),
                                          (dir / "chromium.log").string()),
                              status);
  std::stringstream log;
  log << std::ifstream(dir / "chromium.log").rdbuf();
  ASSERT_EQ(status, 0) << "chromium failed:\n" << log.str();
  const size_t at = dom.find("<pre id=\"probe\">");
  ASSERT_NE(at, std::string::npos) << "the probe did not run:\n" << dom.substr(0, 2000) << "\n" << log.str();
  const size_t end = dom.find("</pre>", at);
  const json charts = json::parse(unescape(dom.substr(at + 16, end - at - 16)));
  ASSERT_EQ(charts.size(), 3u) << charts.dump(2);
  for (const auto& c : charts) {
    SCOPED_TRACE(c.dump());
    EXPECT_GT(c.at("width").get<double>(), 300);
    EXPECT_GT(c.at("height").get<double>(), 150);
    EXPECT_EQ(c.at("texts"), c.at("all_texts"));  // every label has a rendered length (a font was found)
    EXPECT_GT(c.at("texts").get<int>(), 10);
  }
  EXPECT_EQ(charts[0].at("title"), "Training loss per step (rank 0 of each run)");
  EXPECT_EQ(charts[0].at("lines"), 2);
  EXPECT_EQ(charts[1].at("bars"), 14);  // 4 + 5 + 5 segments
  EXPECT_EQ(charts[2].at("lines"), 3);  // measured, capacity, required
  EXPECT_GE(charts[2].at("markers").get<int>(), 6);

  // A picture for a human; its size says it is not blank (a white page compresses to a few KB).
  const fs::path shot = fs::current_path() / "report_render.png";
  run(fmt::format("{} --screenshot='{}' 'file://{}' 2>>'{}'", base, shot.string(), (dir / "report.html").string(),
                  (dir / "chromium.log").string()),
      status);
  EXPECT_EQ(status, 0);
  ASSERT_TRUE(fs::exists(shot));
  EXPECT_GT(fs::file_size(shot), 20000u);
  std::printf("screenshot of the rendered report: %s\n", shot.c_str());
}

}  // namespace
}  // namespace ddplab::grader::testing
