from DiT4DiT.doctor.checks import main

raise SystemExit(main())
