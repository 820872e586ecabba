from flotilla.cli import main

raise SystemExit(main())
