/*
 * A program that loads its plugin (tests/c/dlclosed_plugin.c) with dlopen
 * when told, so that a selection made before the load can be checked
 * against functions that appear later: tests/programs/live_selection.rs builds it
 * with `gcc -pg`, links it with libfntrace.a and runs it with
 * FNTRACE_CONTROL. Paced by its standard input:
 *
 *   prints "ready", then for each line read:
 *   load LIB  dlopen(LIB), then prints "loaded"
 *   run N     plug_run(N) of the plugin (N calls of plug_mid, each
 *             calling plug_leaf twice), then prints "done"
 *   exit      exits 0 (so does the end of the input)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long (*plug_run)(long);

int main(void) {
    char line[4096];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin) != NULL) {
        long n;
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "load ", 5) == 0) {
            void *handle = dlopen(line + 5, RTLD_NOW);
            if (handle == NULL) {
                fprintf(stderr, "dlopen: %s\n", dlerror());
                return 2;
            }
            plug_run = (long (*)(long))dlsym(handle, "plug_run");
            if (plug_run == NULL)
                return 3;
            printf("loaded\n");
        } else if (sscanf(line, "run %ld", &n) == 1 && plug_run != NULL) {
            plug_run(n);
            printf("done\n");
        } else if (strcmp(line, "exit") == 0) {
            break;
        } else {
            fprintf(stderr, "plugin_host: unknown line %s\n", line);
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}
