// The student-code regions of a lab: parsing the BEGIN/END STUDENT CODE markers, and the kit's
// consistency checks — skeleton and solution differ only inside regions, every skeleton stub
// throws NotImplemented with its own id, and the handout and the code name the same exercises.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace ddplab::grader {

/// One marked region: `// BEGIN STUDENT CODE (03.2: reshuffle per epoch)` ... `// END STUDENT CODE`.
struct Region {
  std::string id;      ///< "03.2"
  std::string title;   ///< "reshuffle per epoch"
  int begin_line = 0;  ///< 1-based line of the BEGIN marker
  int end_line = 0;    ///< 1-based line of the END marker
  std::string body;    ///< the lines between the markers
};

/// A parsed source file: its regions and its text with every region body removed.
struct MarkedFile {
  std::string path;
  std::vector<Region> regions;
  std::vector<std::string> outside;  ///< the lines outside regions (markers kept)
  std::vector<int> outside_lines;    ///< the 1-based line number of each entry of `outside`
};

/// Parses `text` (named `path` in errors). Throws ddplab::Error "path:line: ..." for a malformed
/// BEGIN marker, a nested BEGIN, an END without BEGIN or a region left open, and a region whose id
/// and title both repeat another's (an exercise may have several regions, each with its own title).
MarkedFile parse_marked(const std::string& path, const std::string& text);
MarkedFile parse_marked_file(const std::string& path);

/// Whether a region is still a stub: its code (comments aside) throws
/// `ddplab::NotImplemented("<its id>", ...)`, as every skeleton region does. Deleting or
/// commenting out that throw is what edits it.
bool is_stub(const Region& region);

/// How far a student got with one exercise, from the graded files' regions: how many of its
/// regions were edited (no longer the stub) and where the rest still are ("file:line").
struct ExerciseProgress {
  int edited = 0;
  std::vector<std::string> stubs;
};
/// Per exercise id, over the regions of `files`.
std::map<std::string, ExerciseProgress> exercise_progress(const std::vector<MarkedFile>& files);

/// Problems found by check_lab (empty: consistent). Each names the file and line.
struct KitProblems {
  std::vector<std::string> items;
  bool ok() const { return items.empty(); }
};

/// Checks one lab: for each student file, the labs/ and solutions/ versions have the same
/// regions (ids, order) and the same text outside them; every skeleton region is a stub
/// (is_stub: it throws NotImplemented with its own id) and no solution region is; the exercise ids the handout
/// (labs/LAB/README.md) names equal the region ids in the code. `lab` is the folder name, e.g. "lab01_baseline".
KitProblems check_lab(const std::string& source_root, const std::string& lab);

/// The lab folders of the kit: labs/<name>/ that have a solutions/<name>/ counterpart.
std::vector<std::string> list_labs(const std::string& source_root);
/// The student files of a lab: the regular files in solutions/<lab>/, sorted.
std::vector<std::string> student_files(const std::string& source_root, const std::string& lab);
/// Exercise ids ("01.1") a handout names for lab number `lab_number` ("01").
std::set<std::string> handout_exercise_ids(const std::string& readme_text, const std::string& lab_number);

}  // namespace ddplab::grader
