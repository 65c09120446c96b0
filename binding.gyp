{
  "targets": [
    {
      "target_name": "torchserve",
      "sources": [
        "<!@(node -e \"const fs=require('fs');console.log(fs.readdirSync('native',{recursive:true}).filter(f=>f.endsWith('.cc')).sort().map(f=>'native/'+f).join(' '))\")"
      ],
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
      "cflags_cc": ["-std=c++17", "-frtti", "-fexceptions", "-O2", "-fvisibility=hidden", "-ffp-contract=fast", "-Wno-psabi"],
      "libraries": [
        "<!@(node scripts/torch-paths.mjs --ldflags)",
        "-ldl"
      ]
    }
  ]
}
