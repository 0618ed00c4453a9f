<?php

// No closure commands: app/Console/Commands is loaded by the kernel.
