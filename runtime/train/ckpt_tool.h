/* runtime/train/ckpt_tool.h — `shardc ckpt info|convert` (ckpt_convert.c), the one entry the
 * compiler's command line (main.c) takes from the runtime: checkpoints are the runtime's format. */
#ifndef SHARDRT_CKPT_TOOL_H
#define SHARDRT_CKPT_TOOL_H

/* argv[0] is "info" or "convert" (shardc ckpt's arguments); returns the exit status (a user error
 * exits 1 with its message). */
int rt_ckpt_tool(int argc, char **argv);

#endif
