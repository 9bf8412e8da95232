from draftscope.cli import main

raise SystemExit(main())
