/* A key-value service's handler for argument recording in the flight
 * recorder and `fntrace report --by-arg` (tests/programs/flight_args.rs): key
 * "user:K" (K = 0..7) is asked for K+1 times, fast, returning K; then, if
 * the first argument is "slow", "user:42" once, sleeping 50 ms, returning
 * 0; then main waits 200 ms, so that the recorder drains the slow call
 * before the program ends. With "many" instead, 20,000 more fast calls
 * going round the 8 keys. No library call inside handle_get. */
#include <string.h>
#include <time.h>

__attribute__((noinline)) int handle_get(const char *key) {
    if (key[5] == '4' && key[6] == '2') {
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
        return 0;
    }
    return key[5] - '0';
}

int main(int argc, char **argv) {
    static const char *keys[] = {"user:0", "user:1", "user:2", "user:3",
                                 "user:4", "user:5", "user:6", "user:7"};
    int sum = 0;
    for (int k = 0; k < 8; k++)
        for (int n = 0; n <= k; n++)
            sum += handle_get(keys[k]);
    if (argc > 1 && strcmp(argv[1], "many") == 0)
        for (int n = 0; n < 20000; n++)
            sum += handle_get(keys[n % 8]) - (n % 8);
    if (argc > 1 && strcmp(argv[1], "slow") == 0) {
        sum += handle_get("user:42");
        struct timespec wait = {0, 200 * 1000 * 1000};
        nanosleep(&wait, NULL);
    }
    return sum == 168 ? 0 : 1;
}
