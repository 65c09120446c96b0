{
  "target_defaults": {
    "include_dirs": [
      "native",
      "<!(node scripts/torch-paths.mjs --node-addon-api)",
      "<!@(node scripts/torch-paths.mjs --include)"
    ],
    "defines": [
      "NAPI_VERSION=8",
      "NODE_ADDON_API_CPP_EXCEPTIONS",
      "NODE_ADDON_API_DISABLE_DEPRECATED",
      "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS",
      "<!@(node scripts/torch-paths.mjs --defines)"
    ],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-rtti", "-fno-exceptions", "-std=gnu++17", "-std=gnu++20"],
    "cflags_cc": ["-std=c++17", "-frtti", "-fexceptions", "-O2", "-fvisibility=hidden", "-ffp-contract=fast", "-Wno-psabi"]
  },
  "targets": [
    {
      "target_name": "torchserve",
      "sources": ["<!@(node scripts/torch-paths.mjs --sources torch)"],
      "defines": ["TSN_NATIVE_ONLY=0"],
      "libraries": [
        "<!@(node scripts/torch-paths.mjs --ldflags)",
        "-ldl"
      ]
    },
    {
      "target_name": "torchserve-native",
      "sources": ["<!@(node scripts/torch-paths.mjs --sources native)"],
      "defines": ["TSN_NATIVE_ONLY=1"],
      "libraries": ["-ldl", "-lpthread"]
    }
  ]
}
