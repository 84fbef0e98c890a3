# Whole-program tests of lab 08 (helpers: cmake/LabTests.cmake). 4,096 training samples exported as
# text into the run's folder, batches of 256: 16 steps on one rank; on two, 8 a rank when every rank
# reads the whole file, 7 when each reads its byte range (2,049 and 2,047 lines: whole batches of
# the shorter).
set(args --train-samples 4096 --eval-samples 1000 --log-every 0 --batch 256)
if(LAB_TREE STREQUAL "solutions")
  ddplab_lab_run(text_sync_1 ARGS ${args} --loader sync
                 EXPECT "input: text, parsed on the training thread" "data wait .* ms per step"
                 EQ status=ok phases.steps=16 input.loader=sync input.read=range)
  ddplab_lab_run(text_prefetch_2 RANKS 2 ARGS ${args} --loader prefetch --workers 2 --queue-depth 3
                 EXPECT "byte ranges: rank 0 .0, [0-9]+. [0-9]+ lines, rank 1 .*: disjoint, line-aligned, cover the file"
                        "each rank read only its share" "queue: at most [0-3] batches .*: within the bound"
                        "loader threads left running after the loader was destroyed: 0 of the 2"
                 EQ status=ok phases.steps=7 input.loader=prefetch verdicts.ranges_tile_file.ok=ON
                    verdicts.read_only_own_share.ok=ON input.threads_left=0)
  # The naive way: every rank parses the whole file and keeps one line in two.
  ddplab_lab_run(text_read_all_2 RANKS 2 ARGS ${args} --loader sync --read all
                 EXPECT "every rank reads the whole file \\(4096 lines\\) and keeps one line in 2"
                        "ranks read more than their share"
                 EQ status=ok phases.steps=8 input.read=all verdicts.read_only_own_share.ok=OFF)
  # A worker meets a malformed line: the run stops with the file and line.
  ddplab_lab_run(text_bad_line ARGS ${args} --loader prefetch --workers 2 --corrupt-line 1000 RC 1 TIMEOUT 60
                 EXPECT "train\\.tsv: line 1000: field I1 \\(column 2\\)")
  # --max-steps stops the loop with the workers waiting for room.
  ddplab_lab_run(text_early_stop ARGS ${args} --loader prefetch --workers 3 --queue-depth 2 --max-steps 2 TIMEOUT 60
                 EXPECT "loader threads left running after the loader was destroyed: 0 of"
                 EQ status=ok phases.steps=2 input.threads_left=0)
  ddplab_lab_run(binary_1 ARGS ${args} --source binary EXPECT "input: binary shards" EQ status=ok phases.steps=16 input.source=binary)
  ddplab_lab_run(binary_takes_no_text_flags ARGS ${args} --source binary --loader prefetch RC 2
                 EXPECT "--source binary reads the kit's shards")
else()
  ddplab_skeleton_run(skeleton_run RANKS 2 EXERCISES 08.1 08.2 ARGS ${args} --loader prefetch
                      EXPECT "08.2 not attempted: every rank parses the whole file" EQ phases.steps=8)
  # The binary run needs neither exercise, but a skeleton's run still says which are missing.
  ddplab_skeleton_run(skeleton_binary EXERCISES 08.1 08.2 ARGS ${args} --source binary EQ phases.steps=16)
endif()
