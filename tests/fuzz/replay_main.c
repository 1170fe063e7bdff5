/* Replays a libFuzzer corpus without libFuzzer: each file named on the command
 * line, or each file of each directory named, goes once through
 * LLVMFuzzerTestOneInput.  Lets ctest run every fuzz target's seeds (and any
 * crash reproducer added to the corpus) in the ordinary and sanitizer builds. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;

    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        fclose(f);
        return 1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int i, files = 0, rc = 0;

    for (i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            struct dirent **ents;
            int n = scandir(argv[i], &ents, NULL, alphasort);
            for (int j = 0; j < n; j++) {
                char path[4096];
                if (ents[j]->d_name[0] != '.') {
                    snprintf(path, sizeof(path), "%s/%s", argv[i], ents[j]->d_name);
                    rc |= run_file(path);
                    files++;
                }
                free(ents[j]);
            }
            free(ents);
        } else {
            rc |= run_file(argv[i]);
            files++;
        }
    }
    if (files == 0) {
        fprintf(stderr, "replay: no corpus files given\n");
        return 1;
    }
    printf("replay: %d inputs ran without a crash\n", files);
    return rc;
}
