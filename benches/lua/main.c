/* A minimal standalone Lua interpreter for the real-program benchmark
 * (benches/real_programs.rs): the crates.io package lua-src ships Lua's
 * library sources but not lua.c, so this stands in for it. It runs
 * `main SCRIPT [ARGS...]` as `lua SCRIPT ARGS...` does: the libraries
 * opened, the arguments in the global table `arg`, errors on stderr and
 * exit status 1. */
#include <stdio.h>
#include <stdlib.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCRIPT [ARGS...]\n", argv[0]);
        return 2;
    }
    lua_State *L = luaL_newstate();
    if (L == NULL) {
        fprintf(stderr, "cannot create a Lua state\n");
        return 1;
    }
    luaL_openlibs(L);
    /* arg[0] is the script, arg[1..] its arguments, as lua.c sets them. */
    lua_createtable(L, argc - 2, 1);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    int status = luaL_dofile(L, argv[1]);
    if (status != LUA_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], lua_tostring(L, -1));
    }
    lua_close(L);
    return status == LUA_OK ? EXIT_SUCCESS : EXIT_FAILURE;
}
