/* fa_version.h - what `--version` prints: the release and the commit the
 * binary was built from, e.g. "0.1.0 (commit 7773a4c...)", "-dirty" after
 * the id when tracked files differed from it, "unknown" for a tree without
 * git metadata and no FEDAGG_COMMIT (cmake/fa_version.cmake writes it). */
#ifndef FA_VERSION_H
#define FA_VERSION_H

extern const char fa_version[];

#endif
