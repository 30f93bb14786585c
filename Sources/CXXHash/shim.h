// xxHash 0.8 (Debian libxxhash-dev): the disk format's checksums (XXH3-64).
#include <xxhash.h>
